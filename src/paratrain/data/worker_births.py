"""Forked loader workers that never start: found, replaced, and the pass goes on unchanged.

A DataLoader worker made by ``fork`` copies a parent that runs other threads (gloo's and NCCL's,
the watchdog's, the checkpoint writer's). If one of them holds a lock at that instant, the child
starts with it held and no thread left to release it. CPython before 3.11.10 (and 3.8–3.10 before
their 2024 security releases) has such a lock of its own (gh-112275): a C++ thread that enters
Python at the moment of the fork — gloo's run loop does, freeing a tensor a collective used —
leaves the interpreter's thread-list lock held, and the child waits on it forever inside
``os.fork()``, before any line of the worker runs. The DataLoader then waits forever for that
worker's first batch.

So a loader of ``rt.loader`` whose workers fork records, in memory shared with them, which
workers have run their first line (the ``worker_init_fn`` it wraps). A batch wait is cut into
rounds of 5 s (torch's own interval between its checks for dead workers); at the end of a round,
a worker that is alive and has not started :data:`BIRTH_DEADLINE_S` after its fork is stuck at
birth. Its loader iterator is shut down, the stuck processes are killed, and a new iterator with
the same worker seeds replaces it, skipping the batches already handed out: the loop sees the
same batches, in the same order, as if nothing happened, and a warning names the workers. A slow
batch from started workers is waited for as long as it takes (or up to the user's own
``timeout``). After :data:`MAX_REBIRTHS` replacements in one pass it raises.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data._utils import signal_handling

from paratrain.errors import DataError

#: Seconds a forked worker may take to run its first line before it counts as stuck at birth.
#: A healthy fork runs it within milliseconds; a loaded machine, within a second or two.
BIRTH_DEADLINE_S = 20.0
#: Stuck births replaced in one pass before the loader gives up with an error.
MAX_REBIRTHS = 3
# torch's wording when a batch wait reaches the DataLoader's ``timeout``.
_TIMED_OUT = "DataLoader timed out after"


def signal_handling_interval() -> float:
    """How often torch's DataLoader looks for dead workers while it waits (``MP_STATUS_CHECK_INTERVAL``)."""
    from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL

    return float(MP_STATUS_CHECK_INTERVAL)


def forks_workers(dataloader: DataLoader) -> bool:
    """Does ``dataloader`` start worker processes with ``fork``? (The platform's default counts.)"""
    if dataloader.num_workers == 0:
        return False
    context = dataloader.multiprocessing_context
    if context is None:
        method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    else:
        method = context.get_start_method()
    return method == "fork"


class _MarkStarted:
    """The worker_init_fn of a watched loader: note the start in shared memory, then run the user's."""

    def __init__(self, started: Any, user_fn: Callable[[int], None] | None):
        self.started = started
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        self.started[worker_id] = 1
        if self.user_fn is not None:
            self.user_fn(worker_id)


class BirthWatch:
    """Watches the forked workers of one DataLoader (see the module's docstring).

    Installs itself on ``dataloader``: its ``worker_init_fn`` (wrapping the user's) and, when the
    user set no ``timeout``, a ``timeout`` of torch's interval between its checks for dead workers
    (5 s) — the length of one round of a batch wait, not a limit on it.
    """

    def __init__(self, dataloader: DataLoader):
        self.dataloader = dataloader
        # Shared anonymous memory: a forked child writes, the parent reads, no lock needed for a flag.
        self._started = multiprocessing.get_context("fork").RawArray("b", dataloader.num_workers)
        self._user_timeout = dataloader.timeout
        dataloader.worker_init_fn = _MarkStarted(self._started, dataloader.worker_init_fn)
        if self._user_timeout == 0:  # rounds as long as torch's own between its checks for dead workers
            dataloader.timeout = min(signal_handling_interval(), BIRTH_DEADLINE_S)
        self._born_at = 0.0

    def iterate(self, new_iterator: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """The batches of one pass of ``new_iterator()``, replacing it when a worker is stuck at birth.

        ``new_iterator`` must give the same batches each time it is called for this pass (same
        sampler position, same worker seeds): the batches already handed out are skipped.

        Raises:
            DataError: workers were stuck at birth :data:`MAX_REBIRTHS` times in one pass.
            RuntimeError: torch's, when the user's own ``timeout`` passes with every worker started.
        """
        iterator = self._begin(new_iterator)
        handed = rebirths = to_skip = 0
        while True:
            try:
                batch = self._next(iterator)
            except StopIteration:
                return
            except _StuckAtBirth as stuck:
                rebirths += 1
                self._put_down(iterator, stuck.workers)
                if rebirths > MAX_REBIRTHS:
                    raise DataError(f"loader workers were stuck at birth {rebirths} times in one pass (last: "
                                    f"{stuck.describe()}); a fork copies the locks other threads hold — upgrade "
                                    "Python to 3.11.10 or later, or pass multiprocessing_context='forkserver'") from None
                warnings.warn(f"loader {stuck.describe()} stuck at birth for {BIRTH_DEADLINE_S:.0f}s (a fork that "
                              "copied a lock another thread held; CPython < 3.11.10 has one: gh-112275): killed and "
                              f"replaced, {handed} batch(es) of this pass loaded again; the batches are unchanged",
                              RuntimeWarning, stacklevel=2)
                iterator = self._begin(new_iterator)
                to_skip = handed
                continue
            if to_skip:  # handed out before the replacement: the same batch again, dropped
                to_skip -= 1
                continue
            handed += 1
            yield batch

    def _begin(self, new_iterator: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        # Persistent workers, once started, serve every later pass: no fork, the flags stay.
        if not (self.dataloader.persistent_workers and self.dataloader._iterator is not None):
            for worker in range(len(self._started)):
                self._started[worker] = 0
            self._born_at = time.monotonic()
        return new_iterator()

    def _next(self, iterator: Iterator[Any]) -> Any:
        while True:
            try:
                return next(iterator)
            except RuntimeError as exc:
                if not str(exc).startswith(_TIMED_OUT):
                    raise
                stuck = self._stuck(iterator)
                if stuck:
                    raise _StuckAtBirth(stuck) from None
                if self._user_timeout > 0:
                    raise  # the user's own limit, with every worker started: theirs to handle

    def _stuck(self, iterator: Any) -> list[tuple[int, Any]]:
        """Workers alive and not started :data:`BIRTH_DEADLINE_S` after this iterator began."""
        if time.monotonic() - self._born_at < BIRTH_DEADLINE_S:
            return []
        workers = getattr(iterator, "_workers", [])
        return [(i, w) for i, w in enumerate(workers) if not self._started[i] and w.is_alive()]

    def _put_down(self, iterator: Any, stuck: list[tuple[int, Any]]) -> None:
        """Kill ``iterator``'s stuck workers, then shut it down.

        SIGKILL, because nothing else ends them: a process stuck inside ``fork`` runs no Python,
        and the Python signal handlers it inherited only set a flag. torch stops watching these
        pids first, or their deaths by signal would raise in this thread; killed first, they
        need no wait in the shutdown's joins.
        """
        if iterator._worker_pids_set:
            signal_handling._remove_worker_pids(id(iterator))
            iterator._worker_pids_set = False
        for _, worker in stuck:
            try:
                os.kill(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            worker.join(timeout=10)
        iterator._shutdown_workers()
        if self.dataloader._iterator is iterator:  # persistent workers: make the next iter() fork anew
            self.dataloader._iterator = None


class _StuckAtBirth(Exception):
    def __init__(self, workers: list[tuple[int, Any]]):
        super().__init__()
        self.workers = workers

    def describe(self) -> str:
        return ", ".join(f"worker {i} (pid {w.pid})" for i, w in self.workers)
