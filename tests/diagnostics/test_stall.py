"""Who stalled, from the ranks' progress records; and the watchdog thread on one process."""

from __future__ import annotations

import time

import pytest

from paratrain.diagnostics.stall import Beat, stall_message, stalled_ranks, subset_collective
from paratrain.diagnostics.watchdog import Watchdog
from paratrain.errors import ConfigError


def beat(rank, step, phase, idle):
    return Beat(rank, "host", 100 + rank, step, phase, idle, 1)


def test_the_rank_behind_is_stalled_not_the_ones_waiting_for_it():
    # rank 1 sleeps after step 3; rank 0 went on and waits in step 4's gradient all-reduce.
    beats = [beat(0, 3, "backward", 9.0), beat(1, 3, "logging", 10.0)]
    assert stalled_ranks(beats, 10.0) == [1]
    assert stalled_ranks(beats, 11.0) == []  # not yet
    message = stall_message(beats, [1], 10.0, {1: "on_step_end (train.py:12: time.sleep(3600))"})
    assert message.startswith("stall: no progress for 10s: rank 1 (host host, pid 101) at step 3, phase logging")
    assert "time.sleep(3600)" in message and "rank 0 waits at step 3, phase backward" in message
    assert "rank-dependent" not in message  # rank 1 sleeps in its own code, not in a collective


def test_a_collective_on_one_rank_only_gets_the_hint():
    # `if rt.is_main: ckpt.save(...)`: rank 0 waits inside the save, rank 1 in the next step's backward.
    beats = [beat(0, 3, "checkpoint", 12.0), beat(1, 3, "backward", 11.9)]
    stalled = stalled_ranks(beats, 10.0)
    assert stalled == [0] and subset_collective(beats, stalled)
    assert "`if rank == 0:` / `if rt.is_main:`" in stall_message(beats, stalled, 10.0, {})


def test_everyone_at_the_same_place_and_silent_ranks():
    beats = [beat(0, 5, "backward", 20.0), beat(1, 5, "backward", 20.0)]
    assert stalled_ranks(beats, 10.0) == [0, 1]
    assert "deadlock in the code or a network problem" in stall_message(beats, [0, 1], 10.0, {})
    assert stalled_ranks(beats[:1], 100.0, silent={1}) == [1]  # its watchdog stopped publishing


def stuck_in_user_code(seconds):
    time.sleep(seconds)


def test_the_watchdog_reports_this_process_stalled_in_the_frame_where_it_sleeps():
    reports = []
    with Watchdog(0.6, rank=0, world_size=1, poll=0.1, on_stall=reports.append) as watchdog:
        watchdog.progress(7, "forward")
        stuck_in_user_code(2.0)
    assert len(reports) == 1
    assert "rank 0 (host" in reports[0] and "at step 7, phase forward" in reports[0]
    assert "stuck_in_user_code (test_stall.py" in reports[0] and "time.sleep(seconds)" in reports[0]


def test_the_watchdog_stays_quiet_while_progress_is_made_and_refuses_bad_timeouts():
    reports = []
    with Watchdog(0.5, rank=0, world_size=1, poll=0.1, on_stall=reports.append) as watchdog:
        for step in range(15):
            watchdog.progress(step, "forward")
            time.sleep(0.1)
    assert reports == []
    for bad in (0, -1, "10", True):
        with pytest.raises(ConfigError, match="stall_timeout must be a positive number"):
            Watchdog(bad)


def _peer_watch(store, stall_timeout=0.6):
    reports = []
    watchdog = Watchdog(stall_timeout, rank=0, world_size=2, poll=0.1, store=store, on_stall=reports.append)
    with watchdog:
        watchdog.progress(3, "backward")
        deadline = time.monotonic() + 20 * stall_timeout
        while not reports and time.monotonic() < deadline:
            time.sleep(0.05)
    return reports


def test_a_peer_whose_reports_stop_or_never_came_is_named_as_gone():
    import torch.distributed as dist

    store = dist.HashStore()
    store.set("paratrain/watchdog/job/0/beat/1", beat(1, 3, "forward", 0.0).to_json())  # then nothing more
    [report] = _peer_watch(store)
    assert "rank 1 (host host, pid 101) at step 3, phase forward was its last report: its process died" in report
    [report] = _peer_watch(dist.HashStore())
    assert "rank 1 sent no progress report: its process died or its host is unreachable" in report


def test_a_store_that_stops_answering_ends_the_waiting_rank_with_node_0_named():
    import signal
    import subprocess
    import sys
    from datetime import timedelta

    import torch.distributed as dist

    from tests.support import clean_env

    master = subprocess.Popen([sys.executable, "-c", "import sys, time, torch.distributed as d; "
                               "s = d.TCPStore('127.0.0.1', 0, is_master=True); print(s.port, flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        port = int(master.stdout.readline())
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
        master.send_signal(signal.SIGSTOP)  # node 0's host stops answering: no reset, no error
        [report] = _peer_watch(store, stall_timeout=1.0)
    finally:
        master.kill()
        master.wait()
    assert "has not answered for 1s" in report and "node 0 died or is unreachable" in report, report


def test_a_job_stall_timeout_of_zero_gives_an_own_loop_no_watchdog(monkeypatch):
    """``paratrain run --stall-timeout 0`` exports PARATRAIN_STALL_TIMEOUT=0: ``rt.watchdog()``
    keeps its calls and starts no thread; an explicit 0 is still refused."""
    import threading

    import paratrain as pt
    from paratrain.diagnostics import watchdog

    rt = pt.Runtime(strategy="single")
    monkeypatch.setattr(watchdog, "DEFAULT_STALL_TIMEOUT_S", 0.0)
    threads = threading.active_count()
    with rt.watchdog() as dog:
        dog.progress(1, "data")
        assert isinstance(dog, watchdog.NoWatchdog) and threading.active_count() == threads
    with pytest.raises(ConfigError, match="stall_timeout must be a positive number"):
        rt.watchdog(0)
    monkeypatch.setattr(watchdog, "DEFAULT_STALL_TIMEOUT_S", 300.0)
    assert isinstance(rt.watchdog(), watchdog.Watchdog)
    rt.close()
