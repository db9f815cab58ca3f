"""Flags that hold a rank test without saying so in their own test: a flag switched off on every rank but the
first, and a parameter that every call of its function fills with a rank test. Asked by
:class:`~paratrain.diagnostics.rank_guards.RankGuards` for a bare name or attribute it cannot read otherwise.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from paratrain.diagnostics.argument_needs import call_positions
from paratrain.diagnostics.tree_walk import walk

if TYPE_CHECKING:
    from paratrain.diagnostics.rank_guards import RankGuards


def switched_off_elsewhere(guards: RankGuards, values: list[ast.expr]) -> str:
    """A flag set ``True``, then ``False`` under a test that holds on every rank but the first (P5's
    ``self.verbose = True`` … ``if self.args.gpu != 0: self.verbose = False``): a rank-0 test of that kind.
    Every binding must be the constant ``True`` or ``False``, each ``False`` directly under ``if X != 0:`` (or
    ``if not T:`` with ``T`` a rank-0 test); "" otherwise."""
    constants = [v for v in values if isinstance(v, ast.Constant) and v.value in (True, False)]
    offs = [v for v in constants if v.value is False]
    if not offs or len(constants) != len(values) or len(offs) == len(values):
        return ""
    kinds = set()
    for value in offs:
        branch = guards.parents.get(guards.parents.get(value))
        if not (isinstance(branch, ast.If) and guards.parents.get(value) in branch.body):
            return ""
        test = branch.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            kinds.add(guards._direct_test_kind(test.operand))
        elif (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq)
              and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 0):
            kinds.add(guards._direct_test_kind(ast.Compare(test.left, [ast.Eq()], test.comparators)))
        else:
            return ""
    return kinds.pop() if len(kinds) == 1 and "" not in kinds else ""


def passed_by_every_call(guards: RankGuards, test: ast.Name) -> str:
    """A parameter of the function ``test`` sits in, never rebound there, for which every call of the function in
    this file passes a rank test (THUMT's ``print_variables(model, pattern, log=dist.get_rank() == 0)``, whose
    prints sit under ``if log:``): the weakest kind of what they pass; a call that passes nothing counts only
    when the default is ``False`` or ``None``. "" when the function is not called here (other files decide)."""
    function = guards.parents.get(test)
    while function is not None and not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = guards.parents.get(function)
    if function is None or test.id in _assigned_in(function):
        return ""
    arguments = function.args.posonlyargs + function.args.args + function.args.kwonlyargs
    if test.id not in {a.arg for a in arguments}:
        return ""
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]
    defaults = dict(zip(positional[len(positional) - len(function.args.defaults):], function.args.defaults))
    defaults.update({a.arg: d for a, d in zip(function.args.kwonlyargs, function.args.kw_defaults) if d is not None})
    positions = call_positions(function)
    kinds = set()
    for use in guards.uses(function):
        call = guards.parents.get(use)
        if not (isinstance(call, ast.Call) and call.func is use) or any(
                isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return ""
        value = next((k.value for k in call.keywords if k.arg == test.id), None)
        if value is None and test.id in positions and positions.index(test.id) < len(call.args):
            value = call.args[positions.index(test.id)]
        if value is None:
            default = defaults.get(test.id)
            if not (isinstance(default, ast.Constant) and default.value in (False, None)):
                return ""
            continue
        kinds.add(guards._test_kind(value, 1))
    if not kinds or "" in kinds:
        return ""
    return "global" if kinds == {"global"} else "local"


def _assigned_in(function: ast.AST) -> set[str]:
    """The names bound by assignment anywhere in ``function``."""
    return {ast.unparse(target) for node in walk(function)
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])}
