"""The launcher's environment: workers inherit it, and callers get theirs back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def scoped_environ(updates: Mapping[str, str] | None = None) -> Iterator[None]:
    """Apply ``updates`` to ``os.environ`` for the block, then restore it exactly.

    Workers started inside inherit the updates. Restoring everything, not only the
    keys we set, also undoes what torch's agent writes there itself
    (TORCHELASTIC_SIGNALS_TO_HANDLE, OMP_NUM_THREADS), so an in-process caller such as
    ``paratrain train`` or a test keeps its environment.
    """
    saved = dict(os.environ)
    os.environ.update(updates or {})
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
