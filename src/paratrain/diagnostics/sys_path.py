"""The directories a module puts on ``sys.path`` when it runs, read from its statements for ``paratrain check``.

    added_directories(tree, Path("tools/_init_paths.py"))   # [Path("lib")] for HRNet's

Many projects make their packages importable from a script in another folder by hand: ``sys.path.insert(0,
os.path.join(os.path.dirname(__file__), ".."))`` in the script, or an ``_init_paths.py`` beside it that adds
``../lib`` through a helper (HRNet, the detection code bases). Only the module's own top-level statements
are read, and only a path made of ``__file__``, string constants, names assigned such a path, and the usual
``os.path``/``pathlib`` steps (``dirname``, ``join``, ``abspath``, ``realpath``, ``Path(...)``, ``.parent``,
``/``): anything else (the working directory, an environment variable) is not known and adds nothing.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from paratrain.diagnostics.tree_walk import walk

_SAME = ("abspath", "realpath", "normpath", "resolve", "absolute", "Path", "str", "fspath")


def added_directories(tree: ast.Module, file: Path) -> list[Path]:
    """The directories ``tree`` (the module at ``file``) adds to ``sys.path`` at its top level, in order."""
    known: dict[str, str] = {}
    helpers = {stmt.name: stmt for stmt in tree.body if isinstance(stmt, ast.FunctionDef) and _adds_parameter(stmt)}
    added = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = _path_of(stmt.value, file, known)
            if value is not None:
                known[stmt.targets[0].id] = value
            continue
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            continue
        call = stmt.value
        text = ast.unparse(call.func)
        if text in ("sys.path.insert", "sys.path.append") and call.args:
            argument = call.args[-1]
        elif isinstance(call.func, ast.Name) and call.func.id in helpers and call.args:
            argument = call.args[0]  # HRNet's `add_path(lib_path)`
        else:
            continue
        value = _path_of(argument, file, known)
        if value is not None and os.path.isabs(value):  # a relative one is the working directory's
            added.append(Path(os.path.normpath(value)))
    return added


def _adds_parameter(function: ast.FunctionDef) -> bool:
    """``def add_path(path): sys.path.insert(0, path)``: a helper that puts its first parameter on the path."""
    if not function.args.args:
        return False
    parameter = function.args.args[0].arg
    return any(isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.path.insert", "sys.path.append")
               and node.args and isinstance(node.args[-1], ast.Name) and node.args[-1].id == parameter
               for node in walk(function))


def _path_of(node: ast.expr, file: Path, known: dict[str, str]) -> str | None:
    """The path ``node`` makes, or None when it is not made of what the module's docstring lists."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return str(file) if node.id == "__file__" else known.get(node.id)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _path_of(node.value, file, known)
        return None if inner is None else os.path.dirname(inner)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = _path_of(node.left, file, known), _path_of(node.right, file, known)
        return None if left is None or right is None else os.path.join(left, right)
    if not isinstance(node, ast.Call):
        return None
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    receiver = node.func.value if isinstance(node.func, ast.Attribute) and not node.args else None
    parts = [_path_of(arg, file, known) for arg in node.args] or (
        [_path_of(receiver, file, known)] if receiver is not None else [])
    if not parts or any(part is None for part in parts):
        return None
    if name == "dirname" and len(parts) == 1:
        return os.path.dirname(parts[0])
    if name in ("join", "joinpath"):
        return os.path.join(*parts)
    if name in _SAME and len(parts) == 1:
        return os.path.normpath(parts[0]) if os.path.isabs(parts[0]) else parts[0]
    return None
