"""Which arguments a call of a function must pass for a statement of it to run: a parameter whose default
leaves it out. minimind's ``lm_checkpoint(cfg, model=None, ...)`` saves under ``if model is not None:`` and
only loads without a model; TransFG's ``CarsDataset(..., cleaned=None)`` prints under ``if cleaned is not None:``
and no call passes ``cleaned``.

    needed_arguments(function, node)          # frozenset({"model"})
    runs_when_called(function, node, call)    # False: the call leaves ``model`` at None
"""

from __future__ import annotations

import ast

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def needed_arguments(function: _Function, node: ast.AST) -> frozenset[str]:
    """The parameters a call must pass for ``node`` (a save, a print) to run: one with a default of None or False that an ``if``
    holding the save tests for a value (``if model is not None:``, ``if model:``, ``if model and …``: minimind's
    ``lm_checkpoint`` saves when given a model and only loads without one), and one with a true default that an
    ``if`` of the body tests to return before the save (``if return_model: return model``, mace's converters).

    Invariant: a call that passes none of these leaves each at its default, where ``node`` does not run."""
    target, defaults = node, _defaults(function)
    needed = set()
    for node in ast.walk(function):
        if not isinstance(node, ast.If):
            continue
        if any(m is target for s in node.body for m in ast.walk(s)):
            needed |= {name for name in _given_by(node.test) if defaults.get(name, True) in (None, False)}
        elif node in function.body and node.lineno < target.lineno and _returns(node.body) and not node.orelse:
            name = node.test.id if isinstance(node.test, ast.Name) else None
            if name is not None and defaults.get(name) is True:
                needed.add(name)
    return frozenset(needed)


def _defaults(function: _Function) -> dict[str, object]:
    """Each parameter with a constant default → that default (positional ones aligned from the end)."""
    positional = function.args.posonlyargs + function.args.args
    pairs = list(zip(positional[len(positional) - len(function.args.defaults):], function.args.defaults))
    pairs += [(a, d) for a, d in zip(function.args.kwonlyargs, function.args.kw_defaults) if d is not None]
    return {a.arg: d.value for a, d in pairs if isinstance(d, ast.Constant)}


def _given_by(test: ast.expr) -> set[str]:
    """The names a test requires to hold a value: ``x is not None``, ``x``, or either as a part of an ``and``."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    names = set()
    for part in parts:
        if isinstance(part, ast.Name):
            names.add(part.id)
        elif (isinstance(part, ast.Compare) and isinstance(part.left, ast.Name) and len(part.ops) == 1
              and isinstance(part.ops[0], ast.IsNot) and isinstance(part.comparators[0], ast.Constant)
              and part.comparators[0].value is None):
            names.add(part.left.id)
    return names


def _returns(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return)


def passes_one_of(call: ast.Call, positional: list[str], names: frozenset[str]) -> bool:
    """``call`` passes one of ``names``: by keyword, by position, or maybe (``*args``, ``**kwargs``)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
        return True
    given = {kw.arg for kw in call.keywords} | set(positional[:len(call.args)])
    return bool(given & names)


def runs_when_called(function: _Function, node: ast.AST, call: ast.Call) -> bool:
    """``node`` of ``function`` may run when ``call`` calls it: the call passes every argument it needs (a
    method's or a class's ``call`` passes no ``self``)."""
    need = needed_arguments(function, node)
    if not need:
        return True
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]
    positional = positional[1:] if positional[:1] in (["self"], ["cls"]) else positional
    return all(passes_one_of(call, positional, frozenset({name})) for name in need)
