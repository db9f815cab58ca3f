"""The hang watchdog's board in the job's store: every rank's progress record, and the frames a
stalled rank shares.

Each rank writes its :class:`~paratrain.diagnostics.watchdog.stall.Beat` under its own key and reads
everyone's, through its own client connection to the job's TCPStore (torchrun's, or rank 0's
under SLURM/MPI) — never the main thread's, which may be blocked inside a collective or a
store call. Keys live under the run id and restart count, so a restarted job never reads the
records of the attempt before it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from paratrain.diagnostics.watchdog.stall import Beat


def job_store(timeout_s: float) -> Any:
    """A new client connection to the job's TCPStore at MASTER_ADDR:MASTER_PORT, or None without one.

    Each call answers within ``min(30, max(5, timeout_s / 2))`` seconds or raises: short enough
    that a lost store (node 0 gone) is noticed well within the stall timeout ``timeout_s``.
    """
    import torch.distributed as dist

    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not host or not port:
        return None
    answer_s = min(30.0, max(5.0, timeout_s / 2))
    return dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=answer_s))


class ProgressBoard:
    """This rank's view of the board in ``store`` (any ``torch.distributed.Store``).

    Not a collective: every call is this rank's own store calls, and raises what the store
    client raises when the store does not answer (the watchdog decides what that means).
    """

    def __init__(self, store: Any, rank: int, world_size: int):
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self._prefix = f"paratrain/watchdog/{os.environ.get('TORCHELASTIC_RUN_ID', 'job')}/" \
                       f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"

    def publish(self, beat: Beat) -> None:
        """Write this rank's record (the last one replaces the one before)."""
        self.store.set(f"{self._prefix}beat/{self.rank}", beat.to_json())

    def exchange(self, beat: Beat) -> list[Beat]:
        """Publish ``beat``; return the records of every rank that has published one."""
        self.publish(beat)
        keys = [f"{self._prefix}beat/{r}" for r in range(self.world_size)]
        # Once every rank has published (all but the first polls), one call answers for all keys: a
        # call per key would be world_size calls per rank per poll, a million a poll at 1 000 ranks.
        present = keys if self.store.check(keys) else [k for k in keys if self.store.check([k])]
        return [Beat.from_json(v) for v in self.store.multi_get(present)] if present else []

    def round_trip(self) -> None:
        """One small store call and its answer (whether this rank's record exists): a link sample."""
        self.store.check([f"{self._prefix}beat/{self.rank}"])

    def share_frames(self, frames: str) -> None:
        """Leave this rank's main-thread frames for the ranks that report a stall."""
        self.store.set(f"{self._prefix}frames/{self.rank}", frames)

    def collect_frames(self, ranks: Iterable[int], wait_s: float) -> dict[int, str]:
        """The frames ``ranks`` shared, each waited for until ``wait_s`` from now; a rank that shares
        none by then is left out."""
        found: dict[int, str] = {}
        deadline = time.monotonic() + wait_s
        for rank in ranks:
            key = f"{self._prefix}frames/{rank}"
            while rank not in found and time.monotonic() < deadline:
                if self.store.check([key]):
                    found[rank] = self.store.get(key).decode()
                else:
                    time.sleep(0.1)
        return found
