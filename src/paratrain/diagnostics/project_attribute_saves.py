"""A method of a project object that hands an attribute its construction wrapped in DataParallel to a helper that
saves that argument's ``state_dict()``, for ``paratrain check``'s wrapped-state-dict rule.

Time-Series-Library's ``exp.train(setting)``: ``Exp_Basic.__init__`` sets ``self.model = self._build_model()``,
which returns ``nn.DataParallel(model, ...)`` under ``--use_multi_gpu``; ``train`` calls ``early_stopping(vali_loss,
self.model, path)``, an ``EarlyStopping`` built there whose ``__call__`` hands ``model`` on to
``self.save_checkpoint``, which runs ``torch.save(model.state_dict(), ...)``: the checkpoint's keys start with
``module.``.

Invariant: only an attribute the object's ``__init__`` assigns a DataParallel
(:meth:`~paratrain.diagnostics.project_classes.ProjectClasses.wrapped_attributes`) and the method never unwraps
(``self.model.module``), passed as itself to a callee found in the project — a method of the same object, a
function, or an object of a project class made in the method (its ``__call__`` or a method of it) — whose parameter
in that place is saved
(:meth:`~paratrain.diagnostics.project_checkpoints.ProjectCheckpoints.saved_state_dict_lines`), there or after being
handed on once more, unchanged, to a method of the callee's own object. Anything else is left out.
"""

from __future__ import annotations

import ast

from paratrain.diagnostics.argument_needs import call_positions, rebound
from paratrain.diagnostics.assigned_values import assigned_in
from paratrain.diagnostics.project_checkpoints import ProjectCheckpoints
from paratrain.diagnostics.project_classes import ProjectClasses, on_self
from paratrain.diagnostics.project_imports import Module, ProjectImports
from paratrain.diagnostics.tree_walk import walk

_HOPS = 1  # times a saved parameter may be handed on to a method of the callee's own object
_Function = ast.FunctionDef | ast.AsyncFunctionDef
_Class = tuple[Module, ast.ClassDef]
_Callee = tuple[Module, _Function, _Class | None]  # the function, and the class of the object it runs on


class AttributeSaves:
    """Saves of a project object's wrapped attributes, read through the script's project reading."""

    def __init__(self, imports: ProjectImports, classes: ProjectClasses, checkpoints: ProjectCheckpoints) -> None:
        self.imports = imports
        self.classes = classes
        self.checkpoints = checkpoints

    def wrapped_attribute_save(self, module: Module, cls: ast.ClassDef, method: str) -> tuple[Module, int] | None:
        """The module and line of the ``state_dict()`` that calling ``method`` on an object of ``cls`` saves of an
        attribute its construction wrapped in DataParallel (see the module's docstring); None when there is none."""
        wrapped = self.classes.wrapped_attributes(module, cls, "__init__") - {"?"}
        found = self.classes.method(module, cls, method) if wrapped else None
        if found is None:
            return None
        owner, function = found
        # Crossformer's train ends by saving `self.model.module.state_dict() if isinstance(self.model, DataParallel)
        # else …` over the checkpoint: a method that unwraps the attribute itself tells the wrapper apart
        wrapped -= {node.value.attr for node in walk(function) if isinstance(node, ast.Attribute)
                    and node.attr == "module" and on_self(node.value)}
        for call in sorted((n for n in walk(function) if isinstance(n, ast.Call)), key=lambda n: n.lineno):
            for place, argument in _arguments(call):
                if not (on_self(argument) and argument.attr in wrapped):
                    continue
                callee = self._callee(owner, function, (module, cls), call)
                parameter = None if callee is None else _parameter(callee[1], place)
                saved = None if parameter is None else self._saved(callee, parameter, _HOPS)
                if saved is not None:
                    return saved
        return None

    def _callee(self, owner: Module, function: _Function, obj: _Class, call: ast.Call) -> _Callee | None:
        """What ``call``, made in ``function`` (of ``owner``) on the object ``obj``, runs in the project."""
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id == "self":
                return self._method_of(obj, func.attr)
            made = self._class_made(owner, function, func.value.id)
            return None if made is None else self._method_of(made, func.attr)
        if not isinstance(func, ast.Name):
            return None
        made = self._class_made(owner, function, func.id)
        if made is not None:
            return self._method_of(made, "__call__")
        own = [s for s in owner.tree.body
               if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == func.id]
        found = (owner, own[0]) if own else self.imports.function(func.id, within=owner)
        return None if found is None else (found[0], found[1], None)

    def _method_of(self, obj: _Class, name: str) -> _Callee | None:
        found = self.classes.method(obj[0], obj[1], name)
        return None if found is None else (found[0], found[1], obj)

    def _class_made(self, owner: Module, function: _Function, name: str) -> _Class | None:
        """The one project class every assignment of ``name`` in ``function`` builds (``early_stopping =
        EarlyStopping(patience=...)``); None otherwise."""
        values = assigned_in(function, name)
        classes: dict[int, _Class] = {}
        for value in values:
            if not (isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))):
                return None
            text = ast.unparse(value.func)
            own = [s for s in owner.tree.body if isinstance(s, ast.ClassDef) and s.name == text]
            found = (owner, own[0]) if own else self.imports.definition(text, within=owner)
            if found is None or not isinstance(found[1], ast.ClassDef):
                return None
            classes[id(found[1])] = (found[0], found[1])
        return next(iter(classes.values())) if len(classes) == 1 else None

    def _saved(self, callee: _Callee, parameter: str, hops: int) -> tuple[Module, int] | None:
        """Where ``callee`` saves its ``parameter``'s ``state_dict()``: itself, or through a method of its object it
        hands the parameter to unchanged."""
        module, function, obj = callee
        lines = self.checkpoints.saved_state_dict_lines(module, function)
        if parameter in lines:
            return module, lines[parameter]
        if not hops or obj is None or parameter in rebound(function):
            return None
        for call in (n for n in walk(function) if isinstance(n, ast.Call)):
            if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                    and call.func.value.id == "self"):
                continue
            for place, argument in _arguments(call):
                if isinstance(argument, ast.Name) and argument.id == parameter:
                    method = self._method_of(obj, call.func.attr)
                    handed = None if method is None else _parameter(method[1], place)
                    saved = None if handed is None else self._saved(method, handed, hops - 1)
                    if saved is not None:
                        return saved
        return None


def _arguments(call: ast.Call) -> list[tuple[int | str, ast.expr]]:
    """(position or keyword, value) of each argument ``call`` passes by name or place (none after a ``*args``)."""
    placed: list[tuple[int | str, ast.expr]] = []
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Starred):
            break
        placed.append((index, argument))
    return placed + [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]


def _parameter(function: _Function, place: int | str) -> str | None:
    """The parameter of ``function`` an argument in ``place`` fills (a method's ``self`` skipped)."""
    if isinstance(place, str):
        names = {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}
        return place if place in names else None
    positions = call_positions(function)
    return positions[place] if place < len(positions) else None

