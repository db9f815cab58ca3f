"""What the objects a script builds from its project's classes do when built or called, for ``paratrain check``.

    builders = ProjectBuilders(imports, facts)
    builders.wraps_in_data_parallel("exp.train")   # a callee as the script writes it

A callee of the script is followed to the project's code in three shapes, each only when every binding the
script makes of the name is one the project proves:

* a project class built (``Exp(args)``, ``models.Trainer(cfg)``), also through a name the script binds to
  project classes only (``Exp = Exp_Long_Term_Forecast`` in each branch of a task switch): its ``__init__``;
* a method of an object the script built from a project class (``trainer = Trainer(...)``, then
  ``trainer.set_device(...)``): the method of that class;
* a method of an object a project function returned (``model = create_model(opt)``, then
  ``model.parallelize()``): the method of every class the function's module defines or imports that has
  one — all of them must do it, since which one was built is not known.
"""

from __future__ import annotations

import ast

from paratrain.diagnostics.project_classes import ProjectClasses
from paratrain.diagnostics.project_imports import Module, ProjectImports
from paratrain.diagnostics.script_facts import ScriptFacts
from paratrain.diagnostics.tree_walk import walk


class ProjectBuilders:
    """One script's objects of its project's classes (see the module's docstring)."""

    def __init__(self, imports: ProjectImports, facts: ScriptFacts) -> None:
        self.imports = imports
        self.classes = ProjectClasses(imports)
        self.facts = facts

    def wraps_in_data_parallel(self, callee: str) -> bool:
        """Building or calling ``callee`` wraps an attribute of a project object in torch's DataParallel."""
        built = self._classes_named(callee)
        if built:
            return any(self.classes.wraps_in_data_parallel(module, cls, "__init__") for module, cls in built)
        owner, _, method = callee.rpartition(".")
        if not owner:
            return False
        makers = self._makers_of(owner)
        return bool(makers) and any(self._object_wraps(kind, found, method) for kind, found in makers)

    def method(self, callee: str) -> tuple[Module, ast.FunctionDef] | None:
        """The one project method ``callee`` (``train_state.save``) runs: the script's object is built from
        project classes, or returned by a project function that builds it (``return TrainState(...)``), and
        every way it was made gives the same method; None otherwise."""
        owner, _, name = callee.rpartition(".")
        if not owner or self._classes_named(callee):
            return None
        found: dict[int, tuple[Module, ast.FunctionDef]] = {}
        for kind, made in self._makers_of(owner):
            classes = made if kind == "class" else self._returned_classes(*made)
            if not classes:
                return None
            for module, cls in classes:
                method = self.classes.method(module, cls, name)
                if method is None:
                    return None
                found[id(method[1])] = method
        return next(iter(found.values())) if len(found) == 1 else None

    def classes_of(self, owner: str) -> list[tuple[Module, ast.ClassDef]]:
        """Every project class the script's object ``owner`` may be made from (``exp = Exp(args)``, ``Exp`` bound
        to project classes only; or a project function returning one); empty when any way it is made is unknown."""
        classes: list[tuple[Module, ast.ClassDef]] = []
        for kind, made in self._makers_of(owner):
            found = made if kind == "class" else self._returned_classes(*made)
            if not found:
                return []
            classes += found
        return classes

    def _returned_classes(self, module: Module, function: ast.FunctionDef) -> list[tuple[Module, ast.ClassDef]]:
        """The project classes whose objects ``function`` returns (``return TrainState(...)``, or a name it
        assigned one only); empty when anything else may be returned."""
        found = []
        for ret in (n for n in walk(function) if isinstance(n, ast.Return)):
            values = [ret.value]
            if isinstance(ret.value, ast.Name):
                values = [n.value for n in walk(function) if isinstance(n, ast.Assign)
                          and any(isinstance(t, ast.Name) and t.id == ret.value.id for t in n.targets)]
            for value in values:
                if not (isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))):
                    return []
                name = ast.unparse(value.func)
                own = [s for s in module.tree.body if isinstance(s, ast.ClassDef) and s.name == name]
                resolved = (module, own[0]) if own else self.imports.definition(name, within=module)
                if resolved is None or not isinstance(resolved[1], ast.ClassDef):
                    return []
                found.append(resolved)
        return found

    def _classes_named(self, name: str) -> list[tuple[Module, ast.ClassDef]]:
        """The project classes ``name`` is: an imported class, or a name the script binds to such classes
        only (every assignment of it)."""
        found = self.imports.definition(name)
        if found is not None:
            return [found] if isinstance(found[1], ast.ClassDef) else []
        values = self.facts.assigned.get(name, [])
        classes = []
        for value in values:
            if not isinstance(value, (ast.Name, ast.Attribute)):
                return []
            found = self.imports.definition(ast.unparse(value))
            if found is None or not isinstance(found[1], ast.ClassDef):
                return []
            classes.append(found)
        return classes

    def _makers_of(self, owner: str) -> list[tuple[str, object]]:
        """What made the object ``owner`` names, for every assignment of it in the script: ``("class",
        classes)`` or ``("function", (module, def))``; empty when any assignment is something else."""
        values = self.facts.assigned.get(owner, [])
        makers: list[tuple[str, object]] = []
        for value in values:
            if not (isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))):
                return []
            name = ast.unparse(value.func)
            classes = self._classes_named(name)
            if classes:
                makers.append(("class", classes))
                continue
            found = self.imports.function(name)
            if found is None:
                return []
            makers.append(("function", found))
        return makers

    def _object_wraps(self, kind: str, found: object, method: str) -> bool:
        if kind == "class":
            return any(self.classes.wraps_in_data_parallel(module, cls, method) for module, cls in found)
        module, _ = found
        candidates = [(m, c) for m, c in self.classes.visible_classes(module) if self.classes.defines(m, c, method)]
        return bool(candidates) and all(self.classes.wraps_in_data_parallel(m, c, method) for m, c in candidates)
