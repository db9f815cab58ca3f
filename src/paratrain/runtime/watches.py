"""What a multi-process Runtime watches while it is open: started with it, ended by ``rt.close()``.

* its own hang watchdog (when a stall timeout applies): names the rank the others wait for
  (:mod:`paratrain.diagnostics.watchdog`);
* training loaders that every rank reads whole: ``rt.step`` warns once about them
  (:mod:`paratrain.data.unsharded`).
"""

from __future__ import annotations

from paratrain.data import unsharded
from paratrain.diagnostics.watchdog import Watchdog


class RuntimeWatches:
    """Args:
    stall_s: seconds a rank may wait inside one collective before the job ends naming the
        ranks outside it; 0: no watchdog.
    rank, world_size: this process's place; with one process nothing is watched.
    """

    def __init__(self, stall_s: float, rank: int, world_size: int):
        self._watchdog = None
        if stall_s:
            self._watchdog = Watchdog(stall_s, rank=rank, world_size=world_size, in_collective_only=True).start()
        self._loaders = world_size > 1
        if self._loaders:
            unsharded.watch()

    def check_step(self) -> None:
        """At every optimizer step: warn (rank 0, once per loader) about unsharded training data."""
        if self._loaders:
            unsharded.check_step()

    def stop(self) -> None:
        """End both watches (idempotent)."""
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
        if self._loaders:
            self._loaders = False
            unsharded.unwatch()
