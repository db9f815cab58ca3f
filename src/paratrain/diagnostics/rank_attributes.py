"""An object's attribute that holds something on rank 0 only, because only rank 0's construction gives it one.

XMem's trainer class keeps the logger it is given (``self.logger = logger``, ``logger=None`` by default), and the
training script builds it with a logger under ``if local_rank == 0:`` and without one elsewhere; its saves and prints
sit under ``if self.logger is not None:``, which is then a rank-0 test. Read in two halves: here, which parameter of
the class's ``__init__`` the attribute holds (:func:`held_parameter`); in
:func:`~paratrain.diagnostics.project_callers.argument_guard`, what the project's constructions pass for it.

Invariant: the test is ``self.X`` or ``self.X is not None`` inside a top-level class whose every assignment of
``self.X`` stores ``None`` or one parameter of its ``__init__`` whose default is ``None``; anything else (another
value stored, a parameter with another default, ``self.X is None``) is not read as a rank test.
"""

from __future__ import annotations

import ast
from pathlib import Path

from paratrain.diagnostics.argument_needs import call_positions
from paratrain.diagnostics.project_callers import argument_guard
from paratrain.diagnostics.tree_walk import walk


def given_on_rank_0(test: ast.expr, parents: dict[ast.AST, ast.AST], tree: ast.Module, script: Path | None) -> str:
    """The guard ``test`` stands for when it is ``self.X`` (``is not None``) in a top-level class of ``script``
    (``tree``, its nodes' ``parents``) whose ``__init__`` stores in it a parameter that the project's constructions
    pass under a rank test only (:func:`~paratrain.diagnostics.project_callers.argument_guard`); else ``""``."""
    attribute = attribute_of_the_test(test)
    if attribute is None or script is None:
        return ""
    cls = parents.get(test)
    while cls is not None and not isinstance(cls, ast.ClassDef):
        cls = parents.get(cls)
    if cls is None or parents.get(cls) is not tree:
        return ""
    held = held_parameter(cls, attribute)
    return argument_guard(script, cls.name, *held) if held else ""


def attribute_of_the_test(test: ast.expr) -> str | None:
    """``X`` when ``test`` is ``self.X`` or ``self.X is not None``; else None."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
            and _is_none(test.comparators[0])):
        test = test.left
    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self":
        return test.attr
    return None


def held_parameter(cls: ast.ClassDef, attribute: str) -> tuple[str, int] | None:
    """The parameter of ``cls.__init__`` (default ``None``) that every assignment of ``self.<attribute>`` in ``cls``
    stores, or ``None``, and its position among the arguments after ``self``; None when there is no such one."""
    init = next((node for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "__init__"), None)
    if init is None:
        return None
    arguments = init.args.posonlyargs + init.args.args
    defaults = dict(zip([a.arg for a in arguments][len(arguments) - len(init.args.defaults):], init.args.defaults))
    defaults.update({a.arg: d for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults) if d is not None})
    stored = set()
    for node in walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if not (isinstance(target, ast.Attribute) and target.attr == attribute
                    and isinstance(target.value, ast.Name) and target.value.id == "self"):
                continue
            value = node.value
            if isinstance(node, ast.AugAssign) or value is None or not (_is_none(value) or isinstance(value, ast.Name)):
                return None
            if isinstance(value, ast.Name):
                stored.add(value.id)
    if len(stored) != 1:
        return None
    parameter = stored.pop()
    if parameter not in defaults or not _is_none(defaults[parameter]):
        return None
    positions = call_positions(init)
    return parameter, positions.index(parameter) if parameter in positions else -1  # keyword-only: never by position


def _is_none(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value is None
