"""One progress bar for the whole job (rank 0's), and epoch numbering that knows about resume.

Every rank printing its own tqdm bar makes N interleaved bars (and per-rank progress lines, N copies
of each); here rank 0 draws the only bar and the other ranks get a silent
stand-in with the same methods, so the loop calls the same code everywhere.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from paratrain import comm
from paratrain.env.torchelastic import PROGRESS_TTY_VAR


class _SilentBar:
    """tqdm's interface, doing nothing (ranks other than 0, or no terminal)."""

    def __init__(self, iterable: Iterable[Any] | None = None, **_: Any):
        self.iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable if self.iterable is not None else ())

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def write(self, text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        pass

    def __enter__(self) -> _SilentBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(iterable: Iterable[Any] | None = None, enabled: bool | None = None, **tqdm_options: Any):
    """A tqdm bar on rank 0 (over ``iterable``, or updated by hand), a silent stand-in elsewhere.

    Args:
        iterable: what to iterate, or ``None`` for a bar you ``update()`` yourself.
        enabled: ``None`` shows the bar when stderr is a terminal, or when
            ``paratrain run`` names its terminal (tagged output: the bar is drawn there);
            log files get no carriage-return noise. ``True``/``False`` force it.
        **tqdm_options: passed to ``tqdm`` (``total``, ``initial``, ``desc``, ``unit``…).

    Not collective: every rank may call it, only rank 0 draws.
    """
    terminal = None if sys.stderr.isatty() else os.environ.get(PROGRESS_TTY_VAR)
    if enabled is None:
        enabled = sys.stderr.isatty() or bool(terminal)
    if not (enabled and comm.is_main()):
        return _SilentBar(iterable)
    from tqdm.auto import tqdm

    if terminal and "file" not in tqdm_options:
        # Under paratrain run's tagged output our stderr is a log file, read line by line:
        # the bar goes to the launcher's terminal instead (its tagged lines clear it first).
        tqdm_options["file"] = _terminal(terminal) or sys.stderr
    tqdm_options.setdefault("dynamic_ncols", True)
    tqdm_options.setdefault("mininterval", 0.5)
    return tqdm(iterable, **tqdm_options)


@functools.lru_cache(maxsize=None)
def _terminal(path: str) -> TextIO | None:
    """The launcher's terminal, opened once per process (None when it cannot be opened)."""
    try:
        return open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 (kept for the process)
    except OSError:
        return None


def epochs(start: Any = 0, total: int | None = None) -> Iterator[int]:
    """Epoch numbers ``start, …, total - 1`` (0-based), or ``start, start + 1, …`` without end.

    ``start`` is an int, or anything with an ``epoch`` attribute (a resumed
    state, the training loader), so a resumed run continues its epoch instead
    of starting at 0; ``None`` (nothing to resume) is 0.

    A loop counted in optimizer steps leaves ``total`` out and ends itself; its batches,
    crossing epochs, are one generator (the loader starts the next epoch at each pass)::

        batches = (batch for _ in rt.epochs(state) for batch in train)
        while step < max_steps:
            xb, yb = next(batches)
            ...
            if rt.step(opt):
                step += 1
    """
    first = int(getattr(start, "epoch", start) or 0)
    if total is None:
        yield from itertools.count(first)
    else:
        yield from range(first, int(total))
