"""Where ``python -m NAME`` in a worker would find a module, asked from the launcher.

``python -m`` puts the working directory first on ``sys.path``; the ``paratrain``
console script does not, so ``importlib.util.find_spec`` alone misses a package in the
folder the user launches from (``paratrain run -m pkg.mod`` next to ``pkg/``), which
torchrun's workers import fine.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import ModuleSpec


def find_module(name: str) -> ModuleSpec | None:
    """The spec ``python -m name`` would run from the current directory, or None.

    Like ``find_spec``, this imports the parent packages of a dotted name (their
    ``__init__``), not the module itself.
    """
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    finally:
        if added:
            sys.path.remove(cwd)
