"""Where each rank's writing thread is in a background sharded save, left in the job's store, so that a rank whose
wait inside a collective of the write ends (DCP's, on the writing group: they name nobody) can name the ranks that
had not got there.

Each rank marks what it has done alone (its own shards written) before it joins the collective that waits for the
others; a rank whose wait timed out reads which ranks have no mark. Best effort, and never a wait of its own: without
a job store (no ``MASTER_ADDR``/``MASTER_PORT``) or when the store does not answer, nothing is marked and nobody is
named beyond what the error says. The marks of one save are told apart from every other's by the attempt (torchrun's
run id and restart count) and a count of this process's background sharded saves, which every rank makes in the same
order (a save is collective).
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from paratrain import comm

_saves = itertools.count(1)  # this process's background sharded saves: the same count on every rank
_client: tuple[int, Any] | None = None  # (the process that connected, its job store client or None)


class WriteMarks:
    """The marks of one background save of checkpoint ``name``, on every rank alike. Not collective."""

    def __init__(self, name: str):
        self.rank, self.world_size = comm.rank(), comm.world_size()
        self._prefix = (f"paratrain/writes/{os.environ.get('TORCHELASTIC_RUN_ID', 'job')}/"
                        f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{next(_saves)}-{name}/")
        self._reached: set[str] = set()

    def reached(self, phase: str) -> None:
        """This rank has done its own part of ``phase``."""
        self._reached.add(phase)
        store = _job_store()
        if store is not None:
            try:
                store.set(f"{self._prefix}{phase}/{self.rank}", "1")
            except Exception:  # noqa: BLE001 - a mark is a help for an error message, never a failure of the save
                pass

    def missing(self, phase: str) -> list[int]:
        """The other ranks with no mark of ``phase`` ([] when that cannot be told, and when this rank has not done
        its own part either: then its own error, not a wait for the others, is what ended it)."""
        store = _job_store()
        if store is None or phase not in self._reached:
            return []
        keys = {r: f"{self._prefix}{phase}/{r}" for r in range(self.world_size) if r != self.rank}
        try:
            if store.check(list(keys.values())):  # one call when every rank got there
                return []
            return [r for r, key in keys.items() if not store.check([key])]
        except Exception:  # noqa: BLE001 - the store is gone too: say nothing rather than something wrong
            return []


def _job_store() -> Any:
    """This process's one client of the job's store (made at its first mark; None without one)."""
    global _client
    if _client is None or _client[0] != os.getpid():
        try:
            from paratrain.diagnostics.watchdog.board import job_store

            store = job_store(comm.DEFAULT_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - no store to reach: no marks
            store = None
        _client = (os.getpid(), store)
    return _client[1]
