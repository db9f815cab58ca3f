"""Statements of a file that can never run: the body of ``if False:`` (or ``if 0:``), and what follows a ``return``,
``raise``, ``continue`` or ``break`` in the same block (ColBERT's ``print_memory_stats``: ``return  # FIXME`` above
the prints it no longer makes), and what every call of its function skips by the constants it passes
(``maybe_zero_3(p, ignore_status=True)`` beside ``if not ignore_status: print(...)``). Their prints and saves are no
one's output.

Invariant: only what no run can reach is dead; a branch that some flag turns off is not (which flags a run passes
is not known here), nor one a call from another file may take.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from paratrain.diagnostics.argument_needs import skipped_by
from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.project_mentions import called_only_here, named_in_configurations

if TYPE_CHECKING:
    from paratrain.diagnostics.script_facts import ScriptFacts

_LEAVES = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def never_runs(facts: ScriptFacts, node: ast.AST) -> bool:
    """``node`` lies in the body of a constant-false ``if``/``while``, after a statement that leaves its block, or
    in a function every call of which skips it by the constants it passes
    (:func:`_skipped_by_every_caller`)."""
    return _unreachable(facts, node) or _skipped_by_every_caller(facts, node) or _in_a_class_nothing_names(facts, node)


def _in_a_class_nothing_names(facts: ScriptFacts, node: ast.AST) -> bool:
    """``node`` lies in a method of a class of the file's top level that nothing names: not the file (no read of the
    class's name), no other file of its marked project (:func:`~paratrain.diagnostics.project_mentions.
    called_only_here`), no configuration file of it (a Hydra ``_target_``, a LightningCLI ``class_path``); the
    class is undecorated (a registry may keep it). GraphGPT's ``SaveGraphProjectorCallback`` is never given to a
    Trainer, so its ``torch.save`` never runs."""
    function = facts.scope(node)
    owner = facts.parents.get(function) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    if not (isinstance(owner, ast.ClassDef) and facts.parents.get(owner) is facts.tree) or owner.decorator_list:
        return False
    named = sum(len(re.findall(rf"\b{owner.name}\b", line)) for line in facts.lines)
    if facts.loaded_names.get(owner.name) or facts.script is None or named > 1:
        return False  # named again in the file: read, or in a string (Paint-by-Example's `"target": "main.ImageLogger"`)
    return called_only_here(facts.script, owner.name, False) and not named_in_configurations(facts.script, owner.name)


def _skipped_by_every_caller(facts: ScriptFacts, node: ast.AST) -> bool:
    """Every call of the function holding ``node`` skips it by the constants it passes
    (:func:`~paratrain.diagnostics.argument_needs.skipped_by`): MoE-LLaVA's ``maybe_zero_3(..., ignore_status=True)``
    never reaches the ``print`` under ``if not ignore_status:``.

    Invariant: only a function every use of which in this file is a call (not handed on), called at least once,
    and called by no other file of its marked project (:func:`~paratrain.diagnostics.project_mentions.
    called_only_here`); anything else may call it with other values."""
    function = facts.scope(node)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.decorator_list:
        return False
    uses = facts.uses(function)
    calls = [facts.parents.get(use) for use in uses]
    if not calls or not all(isinstance(call, ast.Call) and call.func is use for call, use in zip(calls, uses)):
        return False
    if not all(skipped_by(function, node, call) for call in calls):
        return False
    method = isinstance(facts.parents.get(function), ast.ClassDef)
    return facts.script is not None and called_only_here(facts.script, function.name, method)


def _unreachable(facts: ScriptFacts, node: ast.AST) -> bool:
    child, parent = node, facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, (ast.If, ast.While)) and child in parent.body and constant_false(parent.test):
            return True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and child in block and any(
                    isinstance(stmt, _LEAVES) for stmt in block[:block.index(child)]):
                return True
        child, parent = parent, facts.parents.get(parent)
    return False


def constant_false(test: ast.expr) -> bool:
    """``False``, ``0``, ``None``: a test no run passes."""
    return isinstance(test, ast.Constant) and not test.value


def never_read(facts: ScriptFacts, name: str, consumers: tuple[str, ...], keyword_name: str) -> bool:
    """Nothing reads what the variable ``name`` feeds: its every read is the ``keyword_name=`` argument of a
    ``consumers`` call (``DataLoader(..., sampler=test_sampler)``) whose variables are never read in turn, or a
    position of a returned tuple that every caller in the file unpacks into ``_`` (PVD's ``dataloader, _,
    train_sampler, _ = get_dataloader(...)``). An evaluation loader built and never iterated evaluates nothing
    (LLaMA-Adapter's ``data_loader_val`` beside a ``val_one_epoch`` it never calls).

    Invariant: False whenever a read may reach code this file cannot see (an attribute, a name read anywhere
    else, a tuple returned to a caller in another file).
    """
    if not name.isidentifier() or name not in facts.loaded_names:
        return False
    for read in facts.loaded_names[name]:
        if _discarded_return(facts, read):
            continue
        call = facts.parents.get(facts.parents.get(read))
        if not (isinstance(facts.parents.get(read), ast.keyword) and facts.parents[read].arg == keyword_name
                and isinstance(call, ast.Call) and last_name(call) in consumers):
            return False
        made = [target for target, values in facts.assigned.items() if call in values]
        if not made or not all(target.isidentifier() and all(
                _discarded_return(facts, use) for use in facts.loaded_names.get(target, [])) for target in made):
            return False
    return True


def _discarded_return(facts: ScriptFacts, read: ast.Name) -> bool:
    """``read`` is one element of a returned tuple, and every call of its function in the file assigns that
    element to ``_``; False when the function is called nowhere here (its callers are elsewhere)."""
    items, returned = facts.parents.get(read), None
    if isinstance(items, ast.Tuple):
        returned = facts.parents.get(items)
    if not isinstance(returned, ast.Return):
        return False
    position = items.elts.index(read)
    function = facts.scope(read)
    calls = [call for call in facts.calls if last_name(call) == getattr(function, "name", None)]
    if not calls:
        return False
    for call in calls:
        assign = facts.parents.get(call)
        if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Tuple)
                and len(assign.targets[0].elts) == len(items.elts)):
            return False
        target = assign.targets[0].elts[position]
        if not (isinstance(target, ast.Name) and target.id == "_"):
            return False
    return True
