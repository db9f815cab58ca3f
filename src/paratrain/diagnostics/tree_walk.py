"""Every node under an AST node, read once: the checks walk the same functions and modules again and again (a
script's calls into its project reach the same helpers; each rule walks the module), and ``ast.walk`` was most
of a check's time on projects of large files.

    walk(function)   # a tuple of the nodes ast.walk(function) yields, in its order

The trees are never changed once parsed (a check builds new nodes, it never edits these), so a node's walk stays
true. :func:`forget` drops every walk kept (at the start of each check, which keeps memory to one project's
trees).
"""

from __future__ import annotations

import ast

# id of a node → (the node, its walk): the node is kept so that its id is not reused by another
_WALKS: dict[int, tuple[ast.AST, tuple[ast.AST, ...]]] = {}


def walk(node: ast.AST) -> tuple[ast.AST, ...]:
    """``tuple(ast.walk(node))``, made once per node."""
    known = _WALKS.get(id(node))
    if known is None or known[0] is not node:
        known = _WALKS[id(node)] = (node, tuple(ast.walk(node)))
    return known[1]


def forget() -> None:
    """Drop every walk kept."""
    _WALKS.clear()
