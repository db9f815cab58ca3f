"""Print helpers that test the rank they are given, called with a rank written as a number.

``def print_rank_0(msg, rank=0): if rank <= 0: print(msg)`` prints on rank 0 when each process passes its
own rank; ``print_rank_0(name, 0)`` passes the number 0 on every process, so every process prints.

Invariant: a test on a parameter is decided by the value the call gives it. When a helper prints only
under a test of one of its parameters against numbers (``rank <= 0``, ``rank == 0``, ``rank in (-1, 0)``)
and a call gives that parameter a number that passes the test, the print runs in every process that makes
the call. Any other argument (a name, an expression, the default left out) says nothing here.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass

from paratrain.diagnostics.tree_walk import walk

__all__ = ["RankArgumentPrint", "prints_by_rank_argument"]

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_COMPARE: dict[type, Callable[[object, object], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}


@dataclass(frozen=True)
class RankArgumentPrint:
    """A helper's parameter (its position and name) and the test its print runs under."""

    index: int
    name: str
    test: ast.Compare

    def prints_for(self, call: ast.Call) -> bool:
        """The call gives the parameter a number for which the test passes: the print runs."""
        given = next((kw.value for kw in call.keywords if kw.arg == self.name), None)
        if given is None and self.index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
            given = call.args[self.index]
        number = _number(given) if given is not None else None
        return number is not None and _passes(self.test, number)


def prints_by_rank_argument(function: _Function) -> RankArgumentPrint | None:
    """The parameter test that every ``print`` of ``function`` runs under, when there is one such test."""
    params = [arg.arg for arg in function.args.posonlyargs + function.args.args]
    prints = [node for node in walk(function)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]
    if not prints:
        return None
    tests = []
    for branch in walk(function):
        if isinstance(branch, ast.If) and _parameter_test(branch.test, params) is not None:
            inside = {id(node) for stmt in branch.body for node in walk(stmt)}
            if all(id(p) in inside for p in prints):
                tests.append(branch.test)
    if len(tests) != 1:
        return None
    name = _parameter_test(tests[0], params)
    return RankArgumentPrint(params.index(name), name, tests[0])


def _parameter_test(test: ast.expr, params: list[str]) -> str | None:
    """``rank <= 0`` / ``rank in (-1, 0)`` of a parameter named for a rank against numbers: its name."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)
            and test.left.id in params and "rank" in test.left.id.lower()):
        return None
    op, right = test.ops[0], test.comparators[0]
    if type(op) in _COMPARE and _number(right) is not None:
        return test.left.id
    if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) and all(
            _number(item) is not None for item in right.elts):
        return test.left.id
    return None


def _passes(test: ast.Compare, number: int) -> bool:
    op, right = test.ops[0], test.comparators[0]
    if isinstance(op, (ast.In, ast.NotIn)):
        inside = number in [_number(item) for item in right.elts]
        return inside if isinstance(op, ast.In) else not inside
    return _COMPARE[type(op)](number, _number(right))


def _number(node: ast.expr) -> int | None:
    """An integer written in the code (``0``, ``-1``)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return -inner if inner is not None else None
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None
