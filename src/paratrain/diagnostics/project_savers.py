"""Whether a ``torch.save`` inside a function of the script's project runs in one process only or writes a
file per rank: the tests the project's saver reading (:mod:`paratrain.diagnostics.project_facts`) asks.
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.assigned_values import bound_values
from paratrain.diagnostics.call_names import keyword, last_name
from paratrain.diagnostics.script_facts import ScriptFacts

_RANK_WORD = re.compile(r"rank|main|master|process_index|primary")
_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _assigned_in(function: _Function, name: str) -> list[ast.expr]:
    return [value for node in ast.walk(function) for target, value in bound_values(node)
            if isinstance(target, ast.Name) and target.id == name]


def under_rank_test(function: _Function, node: ast.AST) -> bool:
    """An ``if`` naming a rank (``if dist_rank == 0:``) holds ``node``, or returns before it."""
    for test in (n for n in ast.walk(function) if isinstance(n, ast.If) and _RANK_WORD.search(ast.unparse(n.test))):
        if any(n is node for n in ast.walk(test)) or (
                test.lineno < node.lineno and any(isinstance(n, ast.Return) for n in ast.walk(test))):
            return True
    return False


def nested_call_guarded(mf: ScriptFacts, function: _Function, node: ast.AST) -> bool:
    """``node`` lies in a function nested in ``function`` whose every call there is under a rank test
    (YOLOv6's ``calibrate`` runs its inner ``save_calib_model`` under ``if self.main_process:``)."""
    for inner in ast.walk(function):
        if inner is function or not isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if any(n is node for n in ast.walk(inner)):
            calls = [c for c in ast.walk(function) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                     and c.func.id == inner.name]
            return bool(calls) and all(mf.guard_in_function(c) or under_rank_test(function, c) for c in calls)
    return False


def per_rank_path(function: _Function, save: ast.Call) -> bool:
    """The file's path names a rank, written or through what its names were assigned in the function
    (Megatron's ``path = os.path.join(path, f"{prefix}.rank_{rank_str}")``): a file per rank."""
    target = save.args[1] if len(save.args) > 1 else keyword(save, "f")
    if target is None:
        return False
    names = {node.id for node in ast.walk(target) if isinstance(node, ast.Name)}
    texts = [ast.unparse(target)] + [ast.unparse(v) for name in names for v in _assigned_in(function, name)]
    return any("rank" in text.lower() for text in texts)


def in_memory(function: _Function, save: ast.Call) -> bool:
    """``torch.save(obj, buffer)`` with ``buffer = io.BytesIO()``: a copy in memory, no file (DeiT's EMA load)."""
    target = save.args[1] if len(save.args) > 1 else keyword(save, "f")
    return isinstance(target, ast.Name) and any(
        isinstance(v, ast.Call) and last_name(v) == "BytesIO" for v in _assigned_in(function, target.id))
