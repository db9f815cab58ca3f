"""The classes of a script's project, read for what building one or calling its methods does to the model.

    classes = ProjectClasses(imports)
    classes.wraps_in_data_parallel(module, cls, "__init__")   # Exp(args) wraps self.model in DataParallel

A class's methods are looked up as Python would: its own, then its bases' in order (a base of its module, or
one its module imports from the project: Time-Series-Library's ``Exp_Long_Term_Forecast(Exp_Basic)``), within
the import reading's bounds (:mod:`paratrain.diagnostics.project_imports`). A method *wraps in DataParallel*
when its body, or a method of the same object it calls (``self.m()``, ``super().__init__()``, followed
``_HOPS`` calls deep), assigns an attribute of the object a ``DataParallel(...)`` — written there
(``setattr(self, 'net' + name, torch.nn.DataParallel(net, ids))``) or returned by a method of the object
(``self.model = self._build_model().to(device)``, ``_build_model`` of the subclass returning
``nn.DataParallel(model, device_ids=…)`` in a branch). Only torch's DataParallel counts; a class whose bases
cannot all be read, or a method not found, is an unknown, and unknowns are left out.
"""

from __future__ import annotations

import ast

from paratrain.diagnostics.call_names import last_name, returned_module
from paratrain.diagnostics.project_imports import Module, ProjectImports
from paratrain.diagnostics.tree_walk import walk

_HOPS = 2  # methods of the object followed from the one called
_MAX_LINEAGE = 8  # classes in one lineage: a deep hierarchy is not read further
_Function = ast.FunctionDef | ast.AsyncFunctionDef
_Lineage = list[tuple[Module, ast.ClassDef]]


class ProjectClasses:
    """Lineages and methods of the project's classes, read through ``imports``."""

    def __init__(self, imports: ProjectImports) -> None:
        self.imports = imports

    def lineage(self, module: Module, cls: ast.ClassDef) -> _Lineage:
        """``cls`` and its bases of the project, in lookup order (depth first, left to right)."""
        found: _Lineage = []
        pending = [(module, cls)]
        while pending and len(found) < _MAX_LINEAGE:
            owner, node = pending.pop(0)
            if any(node is seen for _, seen in found):
                continue
            found.append((owner, node))
            bases = []
            for base in node.bases:
                here = [s for s in owner.tree.body if isinstance(s, ast.ClassDef) and s.name == ast.unparse(base)]
                resolved = (owner, here[0]) if here else self.imports.definition(ast.unparse(base), within=owner)
                if resolved is not None and isinstance(resolved[1], ast.ClassDef):
                    bases.append(resolved)
            pending[0:0] = bases
        return found

    def wraps_in_data_parallel(self, module: Module, cls: ast.ClassDef, name: str) -> bool:
        """Calling method ``name`` of an instance of ``cls`` (``__init__``: building one) wraps an attribute
        of it in torch's DataParallel (see the module's docstring)."""
        return bool(self.wrapped_attributes(module, cls, name))

    def wrapped_attributes(self, module: Module, cls: ast.ClassDef, name: str) -> set[str]:
        """The attributes of the object that calling method ``name`` assigns a DataParallel (``"model"`` for
        ``self.model = self._build_model().to(device)``; ``"?"`` for one ``setattr`` names at run time)."""
        lineage = self.lineage(module, cls)
        found = _method(lineage, name, 0)
        return set() if found is None else self._wrapped(lineage, found, _HOPS)

    def visible_classes(self, module: Module) -> list[tuple[Module, ast.ClassDef]]:
        """The classes ``module`` defines and those it imports from the project: what an object one of its
        functions builds may be (CUT's ``create_model`` finds a subclass of the ``BaseModel`` it imports)."""
        found = [(module, s) for s in module.tree.body if isinstance(s, ast.ClassDef)]
        for name in self.imports.bound_names(module):
            resolved = self.imports.definition(name, within=module)
            if resolved is not None and isinstance(resolved[1], ast.ClassDef):
                found.append(resolved)
        return found

    def defines(self, module: Module, cls: ast.ClassDef, name: str) -> bool:
        return _method(self.lineage(module, cls), name, 0) is not None

    def method(self, module: Module, cls: ast.ClassDef, name: str) -> tuple[Module, _Function] | None:
        """The method ``name`` an instance of ``cls`` runs, with the module of the class defining it."""
        lineage = self.lineage(module, cls)
        found = _method(lineage, name, 0)
        return None if found is None else (lineage[found[0]][0], found[1])

    def _wrapped(self, lineage: _Lineage, found: tuple[int, _Function], hops: int) -> set[str]:
        index, function = found
        wrapped: set[str] = set()
        for node in walk(function):
            value, names = None, set()
            if isinstance(node, ast.Assign) and any(on_self(t) for t in node.targets):
                value, names = node.value, {t.attr for t in node.targets if on_self(t)}
            elif isinstance(node, ast.Call) and last_name(node) == "setattr" and len(node.args) == 3 and (
                    isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
                value, names = node.args[2], {"?"}
            if value is not None and self._data_parallel_value(lineage, returned_module(value)):
                wrapped |= names
            if hops and isinstance(node, ast.Call):
                called = _self_call(lineage, node, index)
                if called is not None and called[1] is not function:
                    wrapped |= self._wrapped(lineage, called, hops - 1)
        return wrapped

    def _data_parallel_value(self, lineage: _Lineage, value: ast.expr) -> bool:
        """``DataParallel(...)``, or ``self.m(...)`` where the object's ``m`` returns one."""
        if not isinstance(value, ast.Call):
            return False
        if last_name(value) == "DataParallel":
            return True
        called = _self_call(lineage, value, 0)
        return called is not None and _returns_data_parallel(called[1])


def on_self(target: ast.expr) -> bool:
    """``self.name``: an attribute of the object a method runs on."""
    return isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"


def _method(lineage: _Lineage, name: str, start: int) -> tuple[int, _Function] | None:
    """The first definition of method ``name`` in ``lineage[start:]``, with its class's index."""
    for index in range(start, len(lineage)):
        for stmt in lineage[index][1].body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return index, stmt
    return None


def _self_call(lineage: _Lineage, call: ast.Call, index: int) -> tuple[int, _Function] | None:
    """The method a call inside a method of ``lineage[index]`` runs: ``self.m()`` from the instance's own
    class (a subclass's override first), ``super().m()`` (or ``super(C, self).m()``) from the next class."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    if isinstance(func.value, ast.Name) and func.value.id == "self":
        return _method(lineage, func.attr, 0)
    if isinstance(func.value, ast.Call) and last_name(func.value) == "super":
        return _method(lineage, func.attr, index + 1)
    return None


def _returns_data_parallel(function: _Function) -> bool:
    """The function returns ``DataParallel(...)``: directly or through a name assigned one in it."""
    for ret in (n for n in walk(function) if isinstance(n, ast.Return) and n.value is not None):
        values = [ret.value]
        if isinstance(ret.value, ast.Name):
            values = [node.value for node in walk(function) if isinstance(node, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == ret.value.id for t in node.targets)]
        if any(isinstance(v := returned_module(value), ast.Call) and last_name(v) == "DataParallel" for value in values):
            return True
    return False
