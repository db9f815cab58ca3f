"""Statements of a file that can never run: the body of ``if False:`` (or ``if 0:``), and what follows a ``return``,
``raise``, ``continue`` or ``break`` in the same block (ColBERT's ``print_memory_stats``: ``return  # FIXME`` above
the prints it no longer makes). Their prints and saves are no one's output.

Invariant: only what no run can reach is dead; a branch that some flag turns off is not (which flags a run passes
is not known here).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from paratrain.diagnostics.script_facts import ScriptFacts

_LEAVES = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def never_runs(facts: ScriptFacts, node: ast.AST) -> bool:
    """``node`` lies in the body of a constant-false ``if``/``while`` or after a statement that leaves its block."""
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
