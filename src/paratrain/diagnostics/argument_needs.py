"""Which arguments a call of a function must pass for a statement of it to run: a parameter whose default
leaves it out. minimind's ``lm_checkpoint(cfg, model=None, ...)`` saves under ``if model is not None:`` and
only loads without a model; TransFG's ``CarsDataset(..., cleaned=None)`` prints under ``if cleaned is not None:``
and no call passes ``cleaned``.

    needed_arguments(function, node)          # frozenset({"model"})
    runs_when_called(function, node, call)    # False: the call leaves ``model`` at None
    skipped_by(function, node, call)          # True: ``maybe_zero_3(p, ignore_status=True)``, ``if not ignore_status:``
"""

from __future__ import annotations

import ast

from paratrain.diagnostics.tree_walk import walk

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def needed_arguments(function: _Function, node: ast.AST) -> frozenset[str]:
    """The parameters a call must pass for ``node`` (a save, a print) to run: one with a default of None or False
    that an ``if`` holding the save tests for a value (``if model is not None:``, ``if model:``, ``if model and …``: minimind's
    ``lm_checkpoint`` saves when given a model and only loads without one), and one with a true default that an
    ``if`` of the body tests to return before the save (``if return_model: return model``, mace's converters).

    Invariant: a call that passes none of these leaves each at its default, where ``node`` does not run."""
    held, returns = _needs_of(function)
    needed = set(held.get(id(node), ()))
    for end, name in returns:
        if end < getattr(node, "lineno", 0):  # after the `if` that returns (not in it)
            needed.add(name)
    return frozenset(needed)


# id of a function → (the function, (id of a node → the parameters the ifs holding it test for a value,
# [(the last line of an early return's `if`, the parameter whose true default takes it)])): read once per function
_NEEDS: dict[int, tuple[_Function, tuple[dict[int, set[str]], list[tuple[int, str]]]]] = {}


def _needs_of(function: _Function) -> tuple[dict[int, set[str]], list[tuple[int, str]]]:
    known = _NEEDS.get(id(function))
    if known is None or known[0] is not function:
        if len(_NEEDS) > 4096:  # one check's functions; a long-lived process checking many files starts afresh
            _NEEDS.clear()
        known = _NEEDS[id(function)] = (function, _read_needs(function))
    return known[1]


def _read_needs(function: _Function) -> tuple[dict[int, set[str]], list[tuple[int, str]]]:
    defaults = _defaults(function)
    held: dict[int, set[str]] = {}
    returns: list[tuple[int, str]] = []
    if not defaults:
        return held, returns
    for node in walk(function):
        if not isinstance(node, ast.If):
            continue
        names = {name for name in _given_by(node.test) if name in defaults and defaults[name] in (None, False)}
        if names:
            for statement in node.body:
                for inner in walk(statement):
                    held.setdefault(id(inner), set()).update(names)
    for statement in function.body:
        if (isinstance(statement, ast.If) and isinstance(statement.test, ast.Name) and _returns(statement.body)
                and not statement.orelse and defaults.get(statement.test.id) is True):
            returns.append((statement.end_lineno or statement.lineno, statement.test.id))
    return held, returns


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


def passes_all(call: ast.Call, positional: list[str], names: frozenset[str]) -> bool:
    """``call`` passes every one of ``names`` (each by keyword, by position, or maybe)."""
    return all(passes_one_of(call, positional, frozenset({name})) for name in names)


def call_positions(function: _Function) -> list[str]:
    """The parameters a call fills by position (a method's or a class's call passes no ``self``/``cls``)."""
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]
    return positional[1:] if positional[:1] in (["self"], ["cls"]) else positional


def runs_when_called(function: _Function, node: ast.AST, call: ast.Call) -> bool:
    """``node`` of ``function`` may run when ``call`` calls it: the call passes every argument it needs."""
    need = needed_arguments(function, node)
    return not need or passes_all(call, call_positions(function), need)


_UNKNOWN = object()


def skipped_by(function: _Function, node: ast.AST, call: ast.Call) -> bool:
    """``call`` of ``function`` cannot reach ``node``: an ``if`` of the body holding ``node`` tests parameters only,
    and the values this call gives them — a constant it passes, or the default of one it leaves out — make the
    test false (MoE-LLaVA's ``maybe_zero_3(param, ignore_status=False)`` prints under ``if not ignore_status:``;
    its one caller passes ``ignore_status=True``); or ``node`` is in the ``else:`` of a test they make true.

    Invariant: a value the call may pass that is not a constant (a variable, ``*args``, ``**kwargs``) is unknown,
    and an unknown value never skips anything."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
        return False
    tests = _parameter_tests(function)
    if not tests:
        return False
    values = _values_given(function, call)
    for branching in tests:
        inside_body = any(n is node for stmt in branching.body for n in walk(stmt))
        inside_else = not inside_body and any(n is node for stmt in branching.orelse for n in walk(stmt))
        if inside_body or inside_else:
            truth = _truth(branching.test, values)
            if truth is not _UNKNOWN and bool(truth) != inside_body:
                return True
    return False


# id of a function → (the function, its `if`s whose tests read its parameters only, none of them rebound)
_TESTS: dict[int, tuple[_Function, list[ast.If]]] = {}


def _parameter_tests(function: _Function) -> list[ast.If]:
    known = _TESTS.get(id(function))
    if known is None or known[0] is not function:
        if len(_TESTS) > 4096:
            _TESTS.clear()
        arguments = function.args
        parameters = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
        parameters -= rebound(function)
        tests = [n for n in walk(function) if isinstance(n, ast.If)
                 and {name.id for name in walk(n.test) if isinstance(name, ast.Name)} <= parameters
                 and any(isinstance(name, ast.Name) for name in walk(n.test))]
        known = _TESTS[id(function)] = (function, tests)
    return known[1]


def rebound(function: _Function) -> set[str]:
    """The names ``function`` assigns or deletes somewhere in its body (its parameters among them)."""
    return {n.id for n in walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


def _values_given(function: _Function, call: ast.Call) -> dict[str, object]:
    """Each parameter whose value in ``call`` is a constant: passed as one, or left at a constant default."""
    values = dict(_defaults(function))
    positions = call_positions(function)
    for name, arg in zip(positions, call.args):
        values[name] = arg.value if isinstance(arg, ast.Constant) else _UNKNOWN
    for kw in call.keywords:
        values[kw.arg] = kw.value.value if isinstance(kw.value, ast.Constant) else _UNKNOWN
    return {name: value for name, value in values.items() if value is not _UNKNOWN}


def _truth(test: ast.expr, values: dict[str, object]) -> object:
    """The value of ``test`` from ``values`` alone (``p``, ``not p``, ``p is None``, ``p == 3``, ``and``/``or`` of
    those), else unknown."""
    if isinstance(test, ast.Name):
        return values.get(test.id, _UNKNOWN)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _truth(test.operand, values)
        return inner if inner is _UNKNOWN else not inner
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)
            and isinstance(test.comparators[0], ast.Constant) and test.left.id in values):
        left, right, op = values[test.left.id], test.comparators[0].value, test.ops[0]
        compare = {ast.Is: lambda: left is right, ast.IsNot: lambda: left is not right,
                   ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right}.get(type(op))
        return _UNKNOWN if compare is None else compare()
    if isinstance(test, ast.BoolOp):
        parts = [_truth(part, values) for part in test.values]
        decisive = isinstance(test.op, ast.Or)  # a true part decides an `or`, a false one an `and`
        if any(part is not _UNKNOWN and bool(part) == decisive for part in parts):
            return decisive
        return _UNKNOWN if any(part is _UNKNOWN for part in parts) else not decisive
    return _UNKNOWN
