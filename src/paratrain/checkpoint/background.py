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

The thread is started once per process, at the run's first save (written in the foreground), and then waits for
the next write (a one-worker :class:`~concurrent.futures.ThreadPoolExecutor`, whose thread the interpreter lets
finish its work at exit). Starting a thread per save cost the training thread 5–20 ms at the save, on a loaded machine: ``start()``
waits until the new thread has run, and then for the interpreter lock that thread holds for up to a switch
interval (5 ms); handing a write to a waiting thread costs tens of microseconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from paratrain.goodput import ledger

_writer: tuple[int, ThreadPoolExecutor] | None = None  # (the process it was made in, the executor)
_writer_made = threading.Lock()


def _writing_thread() -> ThreadPoolExecutor:
    """This process's writing thread (made at the run's first save, else at its first background save; a forked
    child makes its own)."""
    global _writer
    with _writer_made:
        if _writer is None or _writer[0] != os.getpid():
            _writer = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="paratrain-checkpoint"))
        return _writer[1]


def start_writing_thread() -> None:
    """Start this process's writing thread now and wait until it runs, so that the first background save hands
    its write to a waiting thread too (called at a run's first save, which is written in the foreground)."""
    _writing_thread().submit(lambda: None).result()


class BackgroundWrite:
    """One checkpoint to be written by this process's writing thread, from :meth:`start`; ``write()`` returns its
    final path. One at a time: the next is handed over only after :meth:`wait` (:meth:`Checkpointer.finish_writing`).

    A save makes it with ``start=False`` and starts it as it returns, after its last file write in the training
    thread (the goodput ledger's lines): once the thread runs Python, each time the training thread lets go of
    the interpreter lock (a write to a file, a tensor copy) it waits up to a switch interval (5 ms) to take it
    back."""

    def __init__(self, name: str, write: Callable[[], str], start: bool = True):
        self.name = name
        self.started = time.time()
        self.finished: float | None = None
        # The goodput ledger's steps clock as the write starts and ends: how much the steps beside it slowed.
        self.clocks: tuple[tuple[float, int] | None, tuple[float, int] | None] = (None, None)
        self.path: str | None = None
        self.error: BaseException | None = None
        self._write = write
        self._done: Future | None = None
        if start:
            self.start()

    def start(self) -> None:
        """Hand the write to the thread (once; later calls do nothing)."""
        if self._done is not None:
            return
        self.started = time.time()
        self.clocks = (ledger.steps_clock(), None)
        try:
            self._done = _writing_thread().submit(self._run)
        except RuntimeError:  # the interpreter is exiting (a save from an atexit handler): written here, at once
            self._done = Future()
            self._run()
            self._done.set_result(None)

    def _run(self) -> None:
        try:
            self.path = self._write()
        except BaseException as exc:  # handed to the training thread at the next wait
            self.error = exc
        finally:
            self.finished = time.time()
            self.clocks = (self.clocks[0], ledger.steps_clock())

    @property
    def running(self) -> bool:
        return self._done is None or not self._done.done()

    def wait(self, before: str, say: bool = True) -> None:
        """Join the thread (saying so on stderr, when ``say``, if it still runs; started first if it was not);
        raise what the write raised."""
        self.start()
        if self.running:
            if say:
                print(f"paratrain: checkpoint {self.name} is still being written; waiting for it before {before}",
                      file=sys.stderr, flush=True)
            self._done.result()  # _run keeps what the write raised: this only waits
        if self.error is not None:
            raise self.error
