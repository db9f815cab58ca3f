"""One progress bar for the whole job (rank 0's), and epoch numbering that knows about resume.

Every rank printing its own tqdm bar makes N interleaved bars (seed 003 prints
per-rank lines); here rank 0 draws the only bar and the other ranks get a silent
stand-in with the same methods, so the loop calls the same code everywhere.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any

from paratrain import comm


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
        enabled: ``None`` shows the bar when stderr is a terminal (log files get
            no carriage-return noise); ``True``/``False`` force it.
        **tqdm_options: passed to ``tqdm`` (``total``, ``initial``, ``desc``, ``unit``…).

    Not collective: every rank may call it, only rank 0 draws.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not (enabled and comm.is_main()):
        return _SilentBar(iterable)
    from tqdm.auto import tqdm

    tqdm_options.setdefault("dynamic_ncols", True)
    tqdm_options.setdefault("mininterval", 0.5)
    return tqdm(iterable, **tqdm_options)


def epochs(start: Any, total: int) -> Iterator[int]:
    """Epoch numbers ``start, …, total - 1`` (0-based).

    ``start`` is an int, or anything with an ``epoch`` attribute (a resumed
    state, the training loader), so a resumed run continues its epoch instead
    of starting at 0.
    """
    first = int(getattr(start, "epoch", start) or 0)
    yield from range(first, int(total))
