"""Which value each name of one binding statement receives, however the statement spells it.

Invariant: a value's name is known whatever form binds it — ``x = v``, ``x: T = v``, ``a, x = u, v``
(and ``[a, x] = [u, v]``, ``a, *rest, x = u, w, v``), ``(x := v)``, ``with v as x`` — for a name
(``x``) or an attribute (``self.x``) target. A target whose value cannot be told element by element
(``a, x = f()``, a starred value ``a, x = *pair,``, a subscript ``d["x"] = v``) binds nothing here: the
rules then stay silent about it rather than guess.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from paratrain.diagnostics.call_names import last_name, returned_module
from paratrain.diagnostics.tree_walk import derived, walk

__all__ = ["assigned_in", "bound_values"]

_TARGETS = (ast.Name, ast.Attribute)


def bound_values(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr]]:
    """The ``(target, value)`` pairs that ``node`` binds, when it is an assignment, an annotated
    assignment with a value, a walrus or one item of a ``with``; nothing for any other node."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _paired(target, node.value)
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        yield from _paired(node.target, node.value)
    elif isinstance(node, ast.NamedExpr):
        yield from _paired(node.target, node.value)
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        # `with open(path) as f`: the manager's `__enter__` gives the name; for the values the rules follow
        # (files, loggers, samplers) it is the manager itself
        yield from _paired(node.optional_vars, node.context_expr)


def _paired(target: ast.expr, value: ast.expr) -> Iterator[tuple[ast.expr, ast.expr]]:
    if isinstance(target, _TARGETS):
        yield target, value
        return
    if not (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))):
        return  # `a, b = f()`: which element is which is the callee's to say
    if any(isinstance(item, ast.Starred) for item in value.elts):
        return
    targets, values = target.elts, value.elts
    starred = [i for i, item in enumerate(targets) if isinstance(item, ast.Starred)]
    if not starred:
        if len(targets) == len(values):
            for item, item_value in zip(targets, values):
                yield from _paired(item, item_value)
        return
    # `a, *rest, b = u, v, w, x`: the names before the star take the first values, those after it the last
    star = starred[0]
    after = len(targets) - star - 1
    if star + after > len(values):
        return
    for item, item_value in zip(targets[:star], values[:star]):
        yield from _paired(item, item_value)
    for item, item_value in zip(targets[star + 1:], values[len(values) - after:]):
        yield from _paired(item, item_value)


def assigned_in(function: ast.AST, name: str) -> list[ast.expr]:
    """Every value ``function`` binds to the plain name ``name``, however the binding is spelled."""
    return derived(function, "names bound", _names_bound).get(name, [])


def _names_bound(function: ast.AST) -> dict[str, list[ast.expr]]:
    """Every plain name ``function`` binds, with its values in the order of :func:`walk`."""
    bound: dict[str, list[ast.expr]] = {}
    for node in walk(function):
        for target, value in bound_values(node):
            if isinstance(target, ast.Name):
                bound.setdefault(target.id, []).append(value)
    return bound


def returned_calls(function: ast.AST, names: tuple[str, ...]) -> list[ast.Call]:
    """Calls to ``names`` the function returns: directly, or through a name it assigned one to
    (``model = DDP(model)`` in one branch, ``return model``); not inside a tuple."""
    found = []
    for ret in (n for n in walk(function) if isinstance(n, ast.Return) and n.value is not None):
        values = assigned_in(function, ret.value.id) if isinstance(ret.value, ast.Name) else [ret.value]
        for value in values:
            for choice in ((value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,)):
                choice = returned_module(choice)
                if isinstance(choice, ast.Call) and last_name(choice) in names:
                    found.append(choice)
    return found
