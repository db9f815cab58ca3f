"""Whether a ``torch.save`` inside a function of the script's project runs in one process only or writes a
file per rank: the tests the project's saver reading (:mod:`paratrain.diagnostics.project_facts`) asks.
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.assigned_values import assigned_in
from paratrain.diagnostics.call_names import keyword, last_name
from paratrain.diagnostics.script_facts import ScriptFacts
from paratrain.diagnostics.tree_walk import walk

_RANK_WORD = re.compile(r"rank|main|master|process_index|primary")
_Function = ast.FunctionDef | ast.AsyncFunctionDef


def under_rank_test(function: _Function, node: ast.AST) -> bool:
    """An ``if`` naming a rank (``if dist_rank == 0:``) holds ``node``, or returns before it."""
    for test in (n for n in walk(function) if isinstance(n, ast.If) and _RANK_WORD.search(ast.unparse(n.test))):
        if any(n is node for n in walk(test)) or (
                test.lineno < node.lineno and any(isinstance(n, ast.Return) for n in walk(test))):
            return True
    return False


def stored_rank_flags(facts: ScriptFacts) -> set[str]:
    """The attributes the script sets to a rank-0 test and nothing else (Chinese-CLIP's ``args.should_save =
    args.logs is not None and is_master(args)``), by their last name: the object carrying them is handed to the
    project's functions, which test the flag instead of the rank."""
    flags = set()
    for name, values in facts.assigned.items():
        kept = [v for v in values if not (isinstance(v, ast.Constant) and v.value in (False, None))]
        if "." in name and kept and all(facts.test_kind(v) == "global" for v in kept):
            flags.add(name.rpartition(".")[2])
    return flags


def under_rank_flag(function: _Function, node: ast.AST, flags: set[str]) -> bool:
    """An ``if`` holding ``node`` tests one of ``flags`` (``if args.should_save and step % every == 0:``): alone or
    as a part of an ``and``, not negated.

    Invariant: the flag is true only where the script's rank-0 test is, so what runs under it runs on rank 0.
    """
    for test in (n for n in walk(function) if isinstance(n, ast.If) and any(m is node for m in walk(n))):
        if any(m is node for m in walk(test.test)) or any(m is node for s in test.orelse for m in walk(s)):
            continue  # in the test itself or in the `else`: not under the flag
        parts = test.test.values if isinstance(test.test, ast.BoolOp) and isinstance(test.test.op, ast.And) else [test.test]
        if any(isinstance(part, ast.Attribute) and part.attr in flags for part in parts):
            return True
    return False


def nested_call_guarded(mf: ScriptFacts, function: _Function, node: ast.AST) -> bool:
    """``node`` lies in a function nested in ``function`` whose every call there is under a rank test
    (YOLOv6's ``calibrate`` runs its inner ``save_calib_model`` under ``if self.main_process:``)."""
    for inner in walk(function):
        if inner is function or not isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if any(n is node for n in walk(inner)):
            calls = [c for c in walk(function) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                     and c.func.id == inner.name]
            return bool(calls) and all(mf.guard_in_function(c) or under_rank_test(function, c) for c in calls)
    return False


def per_rank_path(function: _Function, save: ast.Call) -> bool:
    """The file's path names a rank, written or through what its names were assigned in the function
    (Megatron's ``path = os.path.join(path, f"{prefix}.rank_{rank_str}")``): a file per rank."""
    target = save.args[1] if len(save.args) > 1 else keyword(save, "f")
    if target is None:
        return False
    names = {node.id for node in walk(target) if isinstance(node, ast.Name)}
    texts = [ast.unparse(target)] + [ast.unparse(v) for name in names for v in assigned_in(function, name)]
    return any("rank" in text.lower() for text in texts)


def in_memory(function: _Function, save: ast.Call) -> bool:
    """``torch.save(obj, buffer)`` with ``buffer = io.BytesIO()`` in the same function (or module), the buffer handed
    to nothing but a load (``torch.load``, timm's ``model_ema._load_checkpoint``): a copy in memory, no file (DeiT's
    EMA load, mdetr's all_gather)."""
    target = save.args[1] if len(save.args) > 1 else keyword(save, "f")
    if not (isinstance(target, ast.Name) and any(
            isinstance(v, ast.Call) and last_name(v) == "BytesIO" for v in assigned_in(function, target.id))):
        return False
    # handed on to anything but a load (minGPT's `upload_fileobj(buffer, ...)` to S3): a checkpoint after all
    return not any(isinstance(call, ast.Call) and "load" not in last_name(call).lower().replace("upload", "")
                   and any(isinstance(a, ast.Name) and a.id == target.id
                           for a in (*call.args, *(k.value for k in call.keywords)))
                   and call is not save for call in walk(function))

