"""Who stalled, from the ranks' progress records; and the watchdog thread on one process."""

from __future__ import annotations

import time

import pytest

from paratrain.diagnostics.watchdog.stall import Beat, stall_message, stalled_ranks, subset_collective
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


def evidence(rank, step, phase, idle, waits, wait_s=0.0):
    return Beat(rank, "host", 100 + rank, step, phase, idle, 1, waits=waits, wait_s=wait_s)


def test_the_rank_outside_the_collectives_is_stalled_whatever_the_phase_order():
    # rank 1 sleeps at the top of step 3 (its last mark: the optimizer step); rank 0 waits in step 3's
    # gradient all-reduce. By phase order rank 0 (backward) is behind rank 1 (optimizer); by evidence not.
    beats = [evidence(0, 3, "backward", 20.0, True, 19.0), evidence(1, 3, "optimizer", 20.5, False)]
    assert stalled_ranks(beats, 20.0) == [1]
    message = stall_message(beats, [1], 20.0, {1: "loop (train.py:9: time.sleep(3600))"})
    assert message.startswith("stall: no progress for 20s: rank 1 (host host, pid 101) at step 3, phase optimizer, "
                              "in loop (train.py:9: time.sleep(3600)) (not in a collective: the others wait for it); "
                              "rank 0 waits at step 3, phase backward (inside a collective)"), message
    assert "rank-dependent" not in message and not subset_collective(beats, [1])
    # Three ranks, two of them outside: both are named.
    three = beats + [evidence(2, 2, "evaluation", 21.0, False)]
    assert stalled_ranks(three, 20.0) == [1, 2]


def test_the_runtime_watchdog_waits_for_a_collective_to_last_the_timeout():
    # Long work outside any collective on every rank (data preparation): no collective would time out.
    busy_everywhere = [evidence(0, 0, "setup", 900.0, False), evidence(1, 0, "setup", 900.0, False)]
    assert stalled_ranks(busy_everywhere, 600.0, in_collective_only=True) == []
    assert stalled_ranks(busy_everywhere, 600.0) == [0, 1]  # an explicit watchdog counts idle time
    waiting = [evidence(0, 4, "backward", 700.0, True, 599.0), evidence(1, 4, "forward", 700.0, False)]
    assert stalled_ranks(waiting, 600.0, in_collective_only=True) == []
    timed_out = [evidence(0, 4, "backward", 700.0, True, 600.0), waiting[1]]
    assert stalled_ranks(timed_out, 600.0, in_collective_only=True) == [1]
    # Every rank inside a collective, one only just arrived: it completes; all for the timeout: a deadlock.
    met = [evidence(0, 4, "collective", 700.0, True, 650.0), evidence(1, 4, "collective", 3.0, True, 0.4)]
    assert stalled_ranks(met, 600.0, in_collective_only=True) == []
    stuck = [evidence(0, 4, "collective", 700.0, True, 650.0), evidence(1, 4, "checkpoint", 650.0, True, 640.0)]
    assert stalled_ranks(stuck, 600.0, in_collective_only=True) == [1]  # behind, in a collective of its own
    assert subset_collective(stuck, [1])


def test_a_declared_busy_phase_is_no_stall_until_its_limit():
    def busy(rank, busy_s, limit):
        return Beat(rank, "host", 100 + rank, 3, "logging", busy_s, 1, busy="evaluation", busy_s=busy_s,
                    busy_limit_s=limit)

    waiting = evidence(1, 3, "backward", 900.0, True, 900.0)
    assert stalled_ranks([busy(0, 900.0, 1800.0), waiting], 600.0, in_collective_only=True) == []
    over = [busy(0, 1801.0, 1800.0), waiting]
    assert stalled_ranks(over, 600.0, in_collective_only=True) == [0]
    message = stall_message(over, [0], 600.0, {0: "evaluate (eval.py:3: model(batch))"})
    assert "rank 0 (host host, pid 100) at step 3, phase logging, busy with 'evaluation' for 1801s, past its limit " \
           "of 1800s" in message and "in evaluate (eval.py:3: model(batch))" in message


def test_a_silent_rank_on_this_host_is_named_stopped_alive_or_dead_from_its_process():
    # Before: a SIGSTOPped rank was "its process died or its host is unreachable".
    import signal
    import socket
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        def why(pid, host=socket.gethostname()):
            beats = [Beat(0, host, 1, 5, "backward", 0.0, 9, waits=True, wait_s=12.0), Beat(1, host, pid, 5, "forward", 0.0, 3)]
            return stall_message(beats, [1], 10.0, {}, gone={1})

        os_kill = __import__("os").kill
        os_kill(child.pid, signal.SIGSTOP)
        for _ in range(100):  # the kernel sets the state asynchronously
            if "is stopped" in why(child.pid):
                break
            time.sleep(0.05)
        assert f"its process (pid {child.pid}) is stopped, not progressing (SIGSTOP, Ctrl-Z, a debugger)" in why(child.pid)
        os_kill(child.pid, signal.SIGCONT)
        assert "its process is alive but neither progresses nor reports" in why(child.pid)
        assert "its process died or its host is unreachable" in why(child.pid, host="another-host")
    finally:
        child.kill()
        child.wait()
    assert "its process died (its launcher's output says why)" in why(child.pid)


def test_a_rank_just_out_of_a_declared_phase_is_not_taken_for_the_one_the_others_wait_for():
    # rank 0 evaluated alone (rt.busy); rank 1's last record, published a poll before rank 0 came
    # out, still shows it waiting in the barrier for longer than the stall timeout.
    watchdog = Watchdog(0.5, rank=0, world_size=1, poll=0.1)
    with watchdog.busy("evaluation", 30.0):
        time.sleep(0.05)
    watchdog.progress(3, "backward")
    waiting = Beat(1, "host", 101, 3, "evaluation", 0.9, 1, waits=True, wait_s=0.9)
    assert stalled_ranks([watchdog._beat(1), waiting], 0.5, in_collective_only=True) == []
    time.sleep(0.6)  # a stall timeout after the phase ended, a rank that has not moved is blamed again
    assert stalled_ranks([watchdog._beat(2), waiting], 0.5, in_collective_only=True) == [0]


def test_a_peers_idle_time_from_a_setup_only_its_runtime_watched_is_not_a_stall():
    """A Runtime's own watchdog judges only collectives, so the idle time it publishes through a long setup (data
    preparation, waiting for the other node) is no stall: an explicit watchdog that reads that record before the
    peer's own explicit watchdog published (``pt.fit`` starting a poll later there) must not end the job on it."""
    import torch.distributed as dist

    store, reports = dist.HashStore(), []
    runtimes = Watchdog(2.0, rank=1, world_size=2, poll=0.1, store=store, in_collective_only=True).start()
    time.sleep(2.3)  # rank 1's setup: its Runtime's watchdog publishes idle times past the stall timeout
    fits = Watchdog(2.0, rank=0, world_size=2, poll=0.1, store=store, on_stall=reports.append).start()
    try:  # (one process: rank 0's fit watchdog takes over from rank 1's Runtime's, which stops publishing)
        for step in range(10):  # rank 0 trains; rank 1's record stays the setup one, younger than 2 s + a poll
            fits.progress(step, "forward")
            time.sleep(0.1)
    finally:
        fits.stop()  # waits for its thread: a report it began (collecting stacks first) is in by then
        runtimes.stop()
    assert reports == []
