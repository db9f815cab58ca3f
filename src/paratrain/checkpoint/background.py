"""A checkpoint written by a thread while training goes on: a thread on every rank (one-file checkpoints:
see :func:`paratrain.checkpoint.saving._agree_then_write`; sharded ones:
:func:`paratrain.checkpoint.saving._save_shards_in_background`).

The training thread blocks only for its own rank's part: the save's checks, and on rank 0 the copy of the
model's state to host memory (:mod:`.snapshot`); rank 0's thread first copies the optimizers' state, before
their next step, and checks that the state can be saved. The threads of every rank then agree, and rank 0's
makes the hidden directory, writes the files, checksums them, seals, renames, points ``latest`` and prunes — the same steps, in
the same order, as a synchronous save, so a kill at any moment of it leaves the previous complete checkpoint as
the newest. One write at a time: the next save, a resume, the end of a run and a preemption wait for it
(:meth:`Checkpointer.finish_writing`), say so when it is still running, and raise what failed in it. The thread
is not a daemon: a process that exits normally (also ``SystemExit(75)`` after a preemption) finishes the write
first.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable


class BackgroundWrite:
    """One checkpoint being written by a thread; ``write()`` returns its final path."""

    def __init__(self, name: str, write: Callable[[], str]):
        self.name = name
        self.started = time.time()
        self.finished: float | None = None
        self.path: str | None = None
        self.error: BaseException | None = None
        self._write = write
        self._thread = threading.Thread(target=self._run, name=f"paratrain-checkpoint-{name}", daemon=False)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.path = self._write()
        except BaseException as exc:  # handed to the training thread at the next wait
            self.error = exc
        finally:
            self.finished = time.time()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait(self, before: str, say: bool = True) -> None:
        """Join the thread (saying so on stderr, when ``say``, if it still runs); raise what the write raised."""
        if self.running:
            if say:
                print(f"paratrain: checkpoint {self.name} is still being written; waiting for it before {before}",
                      file=sys.stderr, flush=True)
            self._thread.join()
        if self.error is not None:
            raise self.error
