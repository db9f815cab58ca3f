"""Every node under an AST node, read once: the checks walk the same functions and modules again and again (a
script's calls into its project reach the same helpers; each rule walks the module), and ``ast.walk`` was most
of a check's time on projects of large files.

    walk(function)   # a tuple of the nodes ast.walk(function) yields, in its order
    derived(function, "bindings", make)   # make(function), made once per node and name

The trees are never changed once parsed (a check builds new nodes, it never edits these), so a node's walk stays
true, and so does anything derived from them alone (:func:`derived`: the bindings of a function by name). :func:`forget`
drops every walk and derivation kept (at the start of each check, which keeps memory to one project's trees).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

# id of a node → (the node, its walk): the node is kept so that its id is not reused by another
_WALKS: dict[int, tuple[ast.AST, tuple[ast.AST, ...]]] = {}


def walk(node: ast.AST) -> tuple[ast.AST, ...]:
    """``tuple(ast.walk(node))``, made once per node."""
    known = _WALKS.get(id(node))
    if known is None or known[0] is not node:
        known = _WALKS[id(node)] = (node, _walked(node))
    return known[1]


def _walked(node: ast.AST) -> tuple[ast.AST, ...]:
    """``tuple(ast.walk(node))``, breadth first in the same order, without its generators (a third of the time)."""
    found = [node]
    for current in found:  # grows as it goes
        found.extend(children(current))
    return tuple(found)


# id of a node → (the node, its children): walks of nested nodes (a function, then each of its statements) share them
_CHILDREN: dict[int, tuple[ast.AST, list[ast.AST]]] = {}


def children(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))``, in the same order (made once per node; not to be changed)."""
    known = _CHILDREN.get(id(node))
    if known is None or known[0] is not node:
        known = _CHILDREN[id(node)] = (node, _children(node))
    return known[1]


def _children(node: ast.AST) -> list[ast.AST]:
    found: list[ast.AST] = []
    for field in node._fields:
        value = getattr(node, field, None)
        if isinstance(value, ast.AST):
            found.append(value)
        elif isinstance(value, list):
            found.extend(item for item in value if isinstance(item, ast.AST))
    return found


# (id of a node, what) → (the node, the value derived from it)
_DERIVED: dict[tuple[int, str], tuple[ast.AST, object]] = {}


def derived(node: ast.AST, what: str, make: Callable[[ast.AST], _T]) -> _T:
    """``make(node)``, made once per node and ``what`` until :func:`forget`; ``make`` must read the node's tree only."""
    known = _DERIVED.get((id(node), what))
    if known is None or known[0] is not node:
        known = _DERIVED[(id(node), what)] = (node, make(node))
    return known[1]  # type: ignore[return-value]


def forget() -> None:
    """Drop every walk and derivation kept."""
    _WALKS.clear()
    _DERIVED.clear()
    _CHILDREN.clear()
