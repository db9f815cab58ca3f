"""The BatchNorm layers a model the script builds through its own project holds, for ``paratrain check``'s
batchnorm-without-syncbn rule.

    norms = ProjectNorms(imports)
    norms.reached("make_model")   # (module, the BatchNorm call) or None

A callee of the script (``make_model(cfg)``, ``create_RepVGGplus_by_name(name)``, ``GIN(...)`` of another file)
is followed into the project: a function's calls, a class's whole body (the layers its methods build), the
project functions and classes those call (of the same module, or imported), and a factory table of the module
(``repvggplus_func_dict[name](...)``, a dict of the module's functions: every one of them), up to ``_HOPS``
calls deep and ``_MAX_NODES`` definitions. A BatchNorm layer is a call of ``BatchNorm1d``/``2d``/``3d``, or of a
name the module imports as one (``from torch.nn import BatchNorm1d as BatchNorm``).

A block table is followed too: a project class built with a module-level table of rows naming classes
(``MCnet(block_cfg)``, ``block_cfg = YOLOP`` with ``YOLOP = [[-1, Focus, [3, 32, 3]], [-1, Conv, [...]], ...]``)
whose ``__init__`` builds what it iterates (``for i, (f, block, args) in enumerate(block_cfg): block(*args)``,
a call of a name the ``for`` binds): every class the table names is a layer of the model.

Invariant: a finding needs a BatchNorm layer reached this way; which branch builds it is not asked (a model
built of such blocks normalises per process once it is in DDP). Whether the model goes into DDP and no
SyncBatchNorm conversion is made is the rule's to prove.
"""

from __future__ import annotations

import ast
import re

from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.project_imports import Module, ProjectImports
from paratrain.diagnostics.tree_walk import walk

_HOPS = 4
_MAX_NODES = 30
BATCHNORM = re.compile(r"BatchNorm[123]d")
_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


class ProjectNorms:
    """The BatchNorm layers the project's model builders reach (see the module's docstring)."""

    def __init__(self, imports: ProjectImports) -> None:
        self.imports = imports

    def reached(self, callee: str) -> tuple[Module, ast.Call] | None:
        found = self.imports.definition(callee)
        if found is None or not isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return None
        seen = {id(found[1])}
        frontier: list[tuple[Module, _Definition]] = [found]
        for _ in range(_HOPS + 1):
            following = []
            for module, node in frontier:
                aliases = norm_aliases(module.tree)
                calls = [n for n in walk(node) if isinstance(n, ast.Call)]
                norm = next((c for c in calls if BATCHNORM.fullmatch(last_name(c))
                             or isinstance(c.func, ast.Name) and c.func.id in aliases), None)
                if norm is not None:
                    return module, norm
                for call in calls:
                    for step in self._called(module, call) + self._table_rows(module, node, call):
                        if id(step[1]) not in seen and len(seen) < _MAX_NODES:
                            seen.add(id(step[1]))
                            following.append(step)
            frontier = following
        return None

    def _called(self, module: Module, call: ast.Call) -> list[tuple[Module, _Definition]]:
        func = call.func
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):  # `factory[name](...)`
            return [step for name in _table(module.tree, func.value.id) for step in self._named(module, name)]
        if isinstance(func, (ast.Name, ast.Attribute)) and not (
                isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"):
            return self._named(module, ast.unparse(func))
        return []

    def _table_rows(self, module: Module, caller: _Definition, call: ast.Call) -> list[tuple[Module, _Definition]]:
        """The classes of a block table ``call`` hands a project class that builds its rows (see the module's
        docstring); empty for any other call."""
        built = self._called(module, call) if isinstance(call.func, (ast.Name, ast.Attribute)) else []
        if len(built) != 1 or not isinstance(built[0][1], ast.ClassDef) or not _builds_what_it_iterates(built[0][1]):
            return []
        rows = []
        for arg in (a for a in call.args if isinstance(a, ast.Name)):
            table = _module_list(module.tree, _alias(caller, arg.id))
            if table is not None:
                names = {n.id for n in walk(table) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                rows += [step for name in sorted(names) for step in self._named(module, name)
                         if isinstance(step[1], ast.ClassDef)]
        return rows

    def _named(self, module: Module, name: str) -> list[tuple[Module, _Definition]]:
        own = [s for s in module.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               and s.name == name]
        found = (module, own[-1]) if own else self.imports.definition(name, within=module)
        return [found] if found is not None and isinstance(found[1], (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                     ast.ClassDef)) else []


def norm_aliases(tree: ast.Module) -> set[str]:
    """Names a module binds to torch's BatchNorm layers under another name (``import BatchNorm1d as BatchNorm``)."""
    return {alias.asname for node in tree.body if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.asname and BATCHNORM.fullmatch(alias.name)}


def _table(tree: ast.Module, name: str) -> list[str]:
    """The function names of a module-level dict ``name = {"a": f, "b": g}``; empty for anything else."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Dict) and all(isinstance(v, ast.Name) for v in node.value.values):
                return [v.id for v in node.value.values]
            return []
    return []


def _builds_what_it_iterates(cls: ast.ClassDef) -> bool:
    """The class's ``__init__`` calls a name its own ``for`` loop binds (``for f, block, args in rows: block(*args)``)."""
    init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    if init is None:
        return False
    for loop in (n for n in walk(init) if isinstance(n, ast.For)):
        bound = {n.id for n in walk(loop.target) if isinstance(n, ast.Name)}
        if any(isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in bound
               for stmt in loop.body for c in walk(stmt)):
            return True
    return False


def _alias(caller: _Definition, name: str) -> str:
    """The module-level name a local name of ``caller`` is bound to alone (``block_cfg = YOLOP`` → "YOLOP"), or ``name``."""
    values = [n.value for n in walk(caller) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
    return values[0].id if len(values) == 1 and isinstance(values[0], ast.Name) else name


def _module_list(tree: ast.Module, name: str) -> ast.List | ast.Tuple | None:
    """The list or tuple literal a module-level ``name = [...]`` binds, its only binding there; None otherwise."""
    values = [node.value for node in tree.body if isinstance(node, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]
    return values[0] if len(values) == 1 and isinstance(values[0], (ast.List, ast.Tuple)) else None
