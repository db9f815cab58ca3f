"""paratrain's own warnings on a command's console: one line each, no source line.

Python prints a warning as ``FILE:LINE: CheckpointWarning: text`` followed by the source
line that raised it, which reads like a crash to a user. The commands (and the workers
they start) print paratrain's warnings as ``paratrain: warning: text`` instead; every
other warning keeps Python's format. Library users keep Python's warnings untouched.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any


def _is_paratrain(category: type[Warning]) -> bool:
    return category.__module__.split(".")[0] == "paratrain"


def install() -> None:
    """Show paratrain's warnings as one line each on stderr (idempotent)."""
    original = warnings.showwarning
    if getattr(original, "_paratrain_lines", False):
        return

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if not _is_paratrain(category):
            original(message, category, filename, lineno, file, line)
            return
        stream = file if file is not None else sys.stderr
        try:
            stream.write(f"paratrain: warning: {message}\n")
            stream.flush()
        except (OSError, ValueError):  # a closed stream at exit: nothing to show it on
            pass

    show._paratrain_lines = True  # type: ignore[attr-defined]
    warnings.showwarning = show
