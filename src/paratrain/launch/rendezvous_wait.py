"""While a node waits to meet the others, say every few seconds whom it waits for, where, how long.

A node started alone, or pointed at a wrong master address, otherwise prints nothing until
``--rdzv-timeout`` ends (600 s by default): the user cannot tell a slow start from a
mistake. Lines such as::

    paratrain run: waiting for node 1 of 2 at 10.79.0.1:29621 — 30 s of 600 s

go to stderr every :data:`REPORT_EVERY_S` seconds until this node's workers start (the
rendezvous is over) or the wait ends. The wait itself is torch's (its store, bounded by
``--rdzv-timeout``); this only reports on it, from a daemon thread.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from paratrain.env import variables

#: Seconds between two lines; ``PARATRAIN_WAIT_REPORT_S`` changes it (tests use 1).
REPORT_EVERY_S = variables.seconds_or_default("PARATRAIN_WAIT_REPORT_S", 15.0)


def awaited(node_rank: int, min_nodes: int, max_nodes: int, static: bool) -> str:
    """Whom node ``node_rank`` waits for: ``node 0 of 2``, ``node 1 of 2``, ``nodes 1-3 of 4``,
    ``2 to 4 nodes`` (a dynamic rendezvous, where nodes have no fixed rank)."""
    if not static:
        return f"{min_nodes} node{'s' * (min_nodes > 1)}" if min_nodes == max_nodes else f"{min_nodes} to {max_nodes} nodes"
    if node_rank > 0:
        return f"node 0 of {max_nodes}" if max_nodes == 2 else f"node 0 and the others of {max_nodes}"
    others = max_nodes - 1
    return f"node 1 of {max_nodes}" if others == 1 else f"nodes 1-{others} of {max_nodes}"


def waiting_line(who: str, where: str, waited_s: float, timeout_s: float) -> str:
    """``waiting for node 1 of 2 at 10.79.0.1:29621 — 30 s of 600 s``."""
    return f"waiting for {who} at {where} — {waited_s:.0f} s of {timeout_s:g} s"


def workers_started() -> bool:
    """True once this launcher has a child process: torch's agent starts the workers only
    after the rendezvous."""
    import psutil

    try:
        return bool(psutil.Process().children())
    except psutil.Error:
        return False


class RendezvousWait:
    """Context manager: report the wait from a daemon thread until the workers start.

    Args:
        who: whom this node waits for (:func:`awaited`).
        where: ``HOST:PORT`` of the rendezvous.
        timeout_s: the rendezvous timeout, stated in each line.
        started: tells when the wait is over (default :func:`workers_started`).
        every_s: seconds between lines.
    """

    def __init__(self, who: str, where: str, timeout_s: float, started: Callable[[], bool] = workers_started,
                 every_s: float = REPORT_EVERY_S):
        self.who, self.where, self.timeout_s, self.started, self.every_s = who, where, timeout_s, started, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._report, name="paratrain-rendezvous-wait", daemon=True)

    def __enter__(self) -> RendezvousWait:
        self._began = time.monotonic()
        if self.every_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)

    def _report(self) -> None:
        while not self._stop.wait(self.every_s):
            waited = time.monotonic() - self._began
            if self.started():
                return
            if waited > self.timeout_s:
                continue  # the wait's own timeout is due; it ends in its own line
            line = waiting_line(self.who, self.where, waited, self.timeout_s)
            print(f"paratrain run: {line}", file=sys.stderr, flush=True)
