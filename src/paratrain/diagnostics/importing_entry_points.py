"""Entry points of a script's project that import it after choosing the root logger's level by rank, read for
``paratrain check``'s log-on-every-rank rule.

Self-supervised code bases often run their training module from a small launcher (MSN's and I-JEPA's
``main.py``: ``if rank == 0: logger.setLevel(logging.INFO) else: logger.setLevel(logging.ERROR)``, then
``from src.msn_train import main``). The module's own ``logging.basicConfig(level=INFO)`` then changes nothing
(the root has a handler by then), and its ``logger.info`` lines are heard on rank 0 only.

Invariant: only a file at the project's root or in the script's own directory counts, that imports the script's
module by name (``from src.msn_train import main``, ``import msn_train``) and calls ``setLevel``/``basicConfig``
where the level depends on the rank; at most ``_MAX_FILES`` files of at most ``MAX_BYTES`` are read.
"""

from __future__ import annotations

import ast
from pathlib import Path

from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.project_imports import MAX_BYTES, project_root, read_small_file
from paratrain.diagnostics.project_loggers import chooses_by_rank
from paratrain.diagnostics.tree_walk import walk

__all__ = ["levels_chosen_by_an_importer"]

_MAX_FILES = 40
_SETUPS = ("setLevel", "basicConfig")


def levels_chosen_by_an_importer(script: Path) -> bool:
    """A launcher of ``script``'s project imports it and sets the root logger's level by rank first (see the
    module's docstring)."""
    script = script.resolve()
    root = project_root(script)
    candidates = sorted({*root.glob("*.py"), *script.parent.glob("*.py")} - {script})[:_MAX_FILES]
    return any(_chooses_then_imports(path, script.stem) for path in candidates)


def _chooses_then_imports(path: Path, stem: str) -> bool:
    data = read_small_file(path, MAX_BYTES)
    if data is None:
        return False
    source = data.decode("utf-8", "replace")
    if stem not in source or "setLevel" not in source:
        return False
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    imports = any(isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[-1] == stem
                  or isinstance(node, ast.Import) and any(a.name.split(".")[-1] == stem for a in node.names)
                  for node in walk(tree))
    if not imports:
        return False
    for function in (n for n in walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        setups = [n for n in walk(function) if isinstance(n, ast.Call) and last_name(n) in _SETUPS]
        if setups and chooses_by_rank(function, setups):
            return True
    return False
