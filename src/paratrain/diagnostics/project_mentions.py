"""Whether another file of a script's project calls a method: the evidence that a value the file hands back
(a ``DistributedSampler`` it returns, or a DataLoader holding one) is looked after by its caller.

    project_calls(Path("data/build.py"), "set_epoch")   # main.py has `data_loader_train.sampler.set_epoch(epoch)`

Only a project whose root is marked (``.git``, ``pyproject.toml``, ``setup.py``, ``setup.cfg``) is searched: without
a marker nothing says where the project ends, and the answer is False. Bounded: at most ``_MAX_FILES`` Python files
of at most ``MAX_BYTES`` each, hidden and virtual-environment directories skipped; the files' list is read once
per project.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from paratrain.diagnostics.project_imports import ROOT_MARKERS, read_small_file

_MAX_FILES = 600
_SKIPPED = {"node_modules", "site-packages", "build", "dist", "venv", "env", "__pycache__"}


def project_calls(script: Path, method: str) -> bool:
    """Some Python file of ``script``'s project, other than the script, has ``.method(`` in its text."""
    root = _marked_root(script.resolve())
    if root is None:
        return False
    needle = f".{method}(".encode()
    return any(needle in (read_small_file(path) or b"") for path in _python_files(root) if path != script.resolve())


def _marked_root(script: Path) -> Path | None:
    for directory in script.parents:
        if any((directory / marker).exists() for marker in ROOT_MARKERS):
            return directory
    return None


@functools.lru_cache(maxsize=16)
def _python_files(root: Path) -> tuple[Path, ...]:
    found: list[Path] = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith(".") and d not in _SKIPPED)
        found.extend(Path(directory) / name for name in sorted(files) if name.endswith(".py"))
        if len(found) >= _MAX_FILES:
            break
    return tuple(found[:_MAX_FILES])
