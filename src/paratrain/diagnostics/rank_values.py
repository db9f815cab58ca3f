"""Values that hold the process's global rank, whatever the names that keep them say.

A name holds what it is given: ``local_rank = torch.distributed.get_rank()`` (Cutie) holds the global rank, and so
does the result of a function whose every return gives it (UniSRec's ``_build_distribute``, neuraloperator's
``comm.get_local_rank()``). :class:`~paratrain.diagnostics.rank_guards.RankGuards` reads a test of such a name
as a test of the global rank.
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.assigned_values import assigned_in
from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.tree_walk import walk

__all__ = ["global_rank_value", "returning_the_global_rank"]


def global_rank_value(value: ast.expr) -> bool:
    """``dist.get_rank()`` (no group: the rank in the whole job) or ``int(os.environ["RANK"])``: the global rank."""
    if isinstance(value, ast.Call) and last_name(value) == "int" and len(value.args) == 1:
        value = value.args[0]
    if isinstance(value, ast.Call) and last_name(value) == "get_rank":
        return not value.args and not value.keywords
    # ast.unparse writes every string in single quotes
    return bool(re.fullmatch(r"os\.(?:environ\['RANK'\]|environ\.get\('RANK'.*\)|getenv\('RANK'.*\))",
                             ast.unparse(value)))


def returning_the_global_rank(tree: ast.Module) -> set[str]:
    """The functions (and methods) of ``tree`` whose every return gives the global rank, directly or through a
    local name (``local_rank = torch.distributed.get_rank()`` … ``return local_rank``), or 0 where no process
    group is made (``if not dist.is_initialized(): return 0``: one process, rank 0)."""
    found = set()
    for function in (n for n in walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        returns = [n.value for n in walk(function) if isinstance(n, ast.Return) and n.value is not None]
        ranks = [r for r in returns if global_rank_value(r) or isinstance(r, ast.Name) and _holds_the_rank(function, r.id)]
        if ranks and all(r in ranks or isinstance(r, ast.Constant) and r.value == 0 for r in returns):
            found.add(function.name)
    return found


def _holds_the_rank(function: ast.AST, name: str) -> bool:
    values = assigned_in(function, name)
    return bool(values) and all(global_rank_value(v) for v in values)
