"""torchft's Lighthouse as node 0's launcher starts it: its address is waited for within a guard. (Another
node's wait is in test_replica_groups.py; its loss and restart mid-run are tested with the strategy they serve:
tests/strategy/test_ft_ddp.py.)"""

from __future__ import annotations


def test_the_first_line_of_a_process_is_waited_for_within_its_guard():
    """A Lighthouse that never prints its address must not hold the launcher without end."""
    import subprocess
    import sys

    from paratrain.launch.lighthouse import first_line

    talks = subprocess.Popen([sys.executable, "-c", "print('http://vm:29510', flush=True); import time; time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE, text=True)
    try:
        assert first_line(talks, 20.0) == "http://vm:29510"
        assert first_line(silent, 0.5) is None
        assert first_line(gone, 20.0) == ""
    finally:
        for process in (talks, silent, gone):
            process.kill()
            process.wait()


def test_a_group_whose_heartbeats_stop_leaves_the_quorum_one_that_heartbeats_stays_however_late_it_asks():
    """The Lighthouse as the launcher starts it (a real one), with three groups, as torchft's Manager servers speak
    to it: ``killed`` sends one heartbeat and falls silent (its process was killed: its Manager server with it);
    ``live`` and ``survivor`` heartbeat every ``HEARTBEAT_INTERVAL_MS`` from a thread.

    The first quorum (``live`` and ``survivor`` ask) drops ``killed``, and not before its heartbeat timeout has
    passed since its heartbeat (nor the join timeout since the first request, when that is shorter). For the second,
    ``live`` asks only ``1.5 × HEARTBEAT_TIMEOUT_MS`` after ``survivor``: its heartbeats keep it alive, so the
    quorum waits for it and holds both (a Lighthouse that dropped a heartbeating group would answer ``survivor``
    alone: with one of two live groups asking, torchft waits for the other until its heartbeats stop)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    from datetime import timedelta

    import pytest

    pytest.importorskip("torchft")
    from torchft._torchft import LighthouseClient

    from paratrain.launch.lighthouse import Lighthouse
    from paratrain.replica_environ import HEARTBEAT_INTERVAL_MS, HEARTBEAT_TIMEOUT_MS, JOIN_TIMEOUT_MS

    lighthouse = Lighthouse("127.0.0.1", 0, own=True)
    lighthouse.start()
    stop = threading.Event()
    guard = timedelta(seconds=60)  # never reached: the quorums come within seconds

    def heartbeat(client) -> None:
        while not stop.is_set():
            client.heartbeat("live")
            client.heartbeat("survivor")
            time.sleep(HEARTBEAT_INTERVAL_MS / 1000)

    def quorum(client, replica_id: str) -> list[str]:
        return sorted(p.replica_id for p in client.quorum(replica_id=replica_id, timeout=guard).participants)

    try:
        clients = [LighthouseClient(lighthouse.address, connect_timeout=guard) for _ in range(3)]
        live_client, survivor_client, killed_client = clients
        heartbeats = threading.Thread(target=heartbeat, args=(live_client,), daemon=True)
        heartbeats.start()
        with ThreadPoolExecutor(2) as pool:
            silent_since = time.monotonic()  # before: the Lighthouse records the heartbeat after this
            killed_client.heartbeat("killed")
            first = [pool.submit(quorum, live_client, "live"), pool.submit(quorum, survivor_client, "survivor")]
            assert [f.result() for f in first] == [["live", "survivor"]] * 2
            waited = time.monotonic() - silent_since
            assert waited >= min(HEARTBEAT_TIMEOUT_MS, JOIN_TIMEOUT_MS) / 1000, waited
            second = pool.submit(quorum, survivor_client, "survivor")
            time.sleep(1.5 * HEARTBEAT_TIMEOUT_MS / 1000)
            assert not second.done(), second.result()  # waiting for live, which heartbeats
            assert quorum(live_client, "live") == ["live", "survivor"]
            assert second.result() == ["live", "survivor"]
        print(f"killed left the first quorum {waited:.2f} s after its last heartbeat")
    finally:
        stop.set()
        lighthouse.stop()
