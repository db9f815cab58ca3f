"""A function of the script's project that wraps a model in DDP/DataParallel and then saves the wrapper's
``state_dict()`` itself (``do_train(model, ...)``: ``model = DistributedDataParallel(model, ...)``, later
``torch.save(model.state_dict(), path)``), for ``paratrain check``'s wrapped-state-dict rule.

Invariant: reported only when one function's body binds a name to a torch wrapper (``DistributedDataParallel``,
``DDP``, ``DataParallel``; through ``.to()``/``.cuda()``) and, on a later line, a ``state_dict()`` of that same
name reaches a checkpoint (a ``save`` call, a dict, a name later saved) outside the branch a run without
``torch.distributed`` takes; the function never unwraps the name (``model.module``, ``hasattr(model,
"module")``) nor rebinds it after the wrap. Then the keys it writes start with ``module.``, whatever the
caller passes. Anything else is left out.
"""

from __future__ import annotations

import ast

from paratrain.diagnostics.assigned_values import bound_values
from paratrain.diagnostics.call_names import last_name, returned_module
from paratrain.diagnostics.check_wrappers import WRAPPERS, saved_state_dict
from paratrain.diagnostics.script_facts import ScriptFacts
from paratrain.diagnostics.tree_walk import walk

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def might_save_a_wrapper(source: str) -> bool:
    """A cheap test of a module's text before it is read for :func:`wrapped_save`."""
    return "state_dict" in source and ("DataParallel" in source or "DDP" in source)


def wrapped_save(facts: ScriptFacts, function: _Function) -> int | None:
    """The line of the ``state_dict()`` of a wrapper the function made itself and saves (see the module's
    docstring); None when there is none."""
    wraps: dict[str, int] = {}
    rebinds: dict[str, list[int]] = {}
    for node in walk(function):
        for target, value in bound_values(node):
            if not isinstance(target, ast.Name):
                continue
            rebinds.setdefault(target.id, []).append(target.lineno)
            value = returned_module(value)
            if isinstance(value, ast.Call) and last_name(value) in WRAPPERS:
                wraps.setdefault(target.id, target.lineno)
    if not wraps:
        return None
    unwrapped = {node.value.id for node in walk(function) if isinstance(node, ast.Attribute)
                 and node.attr == "module" and isinstance(node.value, ast.Name)} | {
        node.args[0].id for node in walk(function) if isinstance(node, ast.Call) and last_name(node) == "hasattr"
        and node.args and isinstance(node.args[0], ast.Name)}
    for call in sorted((n for n in walk(function) if isinstance(n, ast.Call) and last_name(n) == "state_dict"
                        and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)),
                       key=lambda n: n.lineno):
        name = call.func.value.id
        wrapped_at = wraps.get(name)
        if wrapped_at is None or name in unwrapped or call.lineno <= wrapped_at:
            continue
        if any(wrapped_at < line < call.lineno for line in rebinds.get(name, [])):
            continue
        if not facts.single_process(call) and saved_state_dict(facts, call):
            return call.lineno
    return None
