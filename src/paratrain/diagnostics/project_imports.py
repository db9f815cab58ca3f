"""The modules of the user's project that a training script imports, found and parsed for ``paratrain check``.

    imports = ProjectImports(Path("tools/train.py"), script_tree)
    found = imports.function("utils.save_checkpoint")   # (module, its FunctionDef) or None

A name the script imports (``from utils import save_checkpoint``, ``import pkg.mod as m``, ``from .sub import f``)
is looked for as Python would find it when the script runs as a file or with ``python -m`` from the project's
root: in the script's directory, then in each directory above it up to the project's root (the nearest one
holding ``.git``, ``pyproject.toml``, ``setup.py`` or ``setup.cfg``; without one, a few levels up). Nothing
outside the project is read, so torch, the standard library and site-packages never are; a standard-library
name is taken from the project only when the script's own directory holds it (where Python would find it first).
Directories the script puts on ``sys.path`` itself, or through a module it imports for that (HRNet's
``import _init_paths``), are searched too (:mod:`paratrain.diagnostics.sys_path`).

Bounded so that a check stays well under a second: modules imported by the script and the modules those
import (two levels), at most ``MAX_MODULES`` files of at most ``MAX_BYTES`` each and ``MAX_TOTAL_BYTES`` in
all. A module that cannot be read or parsed is left out, silently: what it would have told is then not
known, and the rules stay quiet.
"""

from __future__ import annotations

import ast
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from paratrain.diagnostics.sys_path import added_directories
from paratrain.diagnostics.tree_walk import walk

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
_LEVELS_WITHOUT_ROOT = 3  # directories above the script searched when no marker names the project's root
MAX_DEPTH = 2  # the script's imports, and theirs
MAX_MODULES = 30
MAX_BYTES = 200_000
MAX_TOTAL_BYTES = 1_500_000


@dataclass(frozen=True)
class Module:
    """One parsed module of the project; ``depth`` 1 for the script's own imports."""

    path: Path
    source: str
    tree: ast.Module
    depth: int


def read_small_file(path: Path, limit: int = MAX_BYTES) -> bytes | None:
    """The bytes of ``path`` when it is a regular file of at most ``limit`` bytes, else None (also when it cannot
    be read). A FIFO or a device is never opened: reading one would wait for a writer, or never end."""
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode) or status.st_size > limit:
            return None
        return path.read_bytes()
    except OSError:
        return None


def project_root(script: Path) -> Path:
    """The nearest directory at or above the script's that marks a project's root; without one, the
    directory ``_LEVELS_WITHOUT_ROOT`` above the script's (or the highest there is)."""
    start = script.resolve().parent
    for directory in (start, *start.parents):
        if any((directory / marker).exists() for marker in ROOT_MARKERS):
            return directory
    above = [start, *start.parents]
    return above[min(_LEVELS_WITHOUT_ROOT, len(above) - 1)]


class ProjectImports:
    """What the imports of one script (and of the modules it imports) point to inside its project."""

    def __init__(self, script: Path, tree: ast.Module) -> None:
        self.script = script.resolve()
        root = project_root(self.script)
        self._search = [self.script.parent]
        for directory in self.script.parent.parents:
            if directory != root and root not in directory.parents:
                break
            self._search.append(directory)
        self._parsed: dict[Path, Module | None] = {}
        self._bytes = 0
        self._script_tree = tree
        self._first = {self.script.parent}  # searched before the standard library
        self._bindings = {self.script: self._bind(tree, self.script.parent)}
        added = self._added_directories(tree)
        if added:
            self._search[1:1] = added
            self._first.update(added)
            self._bindings = {self.script: self._bind(tree, self.script.parent)}

    # ---- what the checks ask --------------------------------------------------------------------
    def function(self, dotted: str, within: Module | None = None) -> tuple[Module, ast.FunctionDef] | None:
        """The project function that ``dotted`` (a callee as written: ``save_model``, ``dist.data_sampler``,
        ``pkg.mod.f``) names in the script, or in ``within`` (a module read here); None when it is not one."""
        found = self.definition(dotted, within)
        return found if found is not None and not isinstance(found[1], ast.ClassDef) else None

    def definition(self, dotted: str, within: Module | None = None) -> tuple[Module, ast.AST] | None:
        """As :meth:`function`, for a function or a class of the project (``BalancedDataParallel(...)``)."""
        source = within.path if within is not None else self.script
        depth = within.depth if within is not None else 0
        bindings = self._bindings_of(source, within)
        head, _, rest = dotted.partition(".")
        names = [head] + (rest.split(".") if rest else [])
        for cut in range(len(names), 0, -1):  # the longest bound prefix: `pkg.mod` before `pkg`
            bound = bindings.get(".".join(names[:cut]))
            if bound is None:
                continue
            tail = names[cut:]
            if isinstance(bound, tuple):  # `from m import f`: a name inside a module
                if tail:
                    return None  # an attribute of something imported (a class's method): not followed
                return self._defined(*bound, depth)
            if len(tail) == 1:
                return self._defined(bound, tail[0], depth)
            return None
        return None

    def bound_names(self, module: Module) -> list[str]:
        """The names ``module``'s imports bind to something of the project."""
        return list(self._bindings_of(module.path, module))

    def shown(self, module: Module) -> str:
        """``module``'s path as a finding names it: from the project's root."""
        root = self._search[-1]
        return module.path.relative_to(root).as_posix() if root in module.path.parents else str(module.path)

    def modules(self) -> list[Module]:
        """Every module parsed so far."""
        return [module for module in self._parsed.values() if module is not None]

    # ---- resolving ------------------------------------------------------------------------------
    def _added_directories(self, tree: ast.Module) -> list[Path]:
        """Project directories that the script, or a module it imports for that (HRNet's ``import
        _init_paths``), puts on ``sys.path`` at its top level."""
        found = added_directories(tree, self.script)
        for bound in self._bindings[self.script].values():
            module = self._module(bound if isinstance(bound, Path) else bound[0], 1)
            if module is not None and "sys.path" in module.source:
                found += added_directories(module.tree, module.path)
        root = self._search[-1]
        return [d for d in dict.fromkeys(found) if d.is_absolute() and (d == root or root in d.parents)
                and d not in self._search]

    def _bindings_of(self, source: Path, module: Module | None) -> dict[str, Path | tuple[Path, str]]:
        if source not in self._bindings:
            self._bindings[source] = self._bind(module.tree, source.parent) if module is not None else {}
        return self._bindings[source]

    def _defined(self, path: Path, name: str, depth: int, hops: int = 0) -> tuple[Module, ast.AST] | None:
        """The function or class ``name`` of the module at ``path``, also when that module imports it from
        another module of the project (a package's ``__init__`` re-exporting it), within the depth."""
        module = self._module(path, depth + 1)
        if module is None:
            return None
        for stmt in module.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
                return module, stmt
        bound = self._bindings_of(module.path, module).get(name)
        # re-exports followed a few times at most (two packages importing a name from each other is a cycle);
        # a package's __init__ that re-exports a name of its own modules is no level of its own
        reexport = module.path.name == "__init__.py"
        if isinstance(bound, tuple) and hops < MAX_DEPTH and (module.depth < MAX_DEPTH or reexport):
            return self._defined(*bound, module.depth - 1 if reexport else module.depth, hops + 1)
        return None

    def _module(self, path: Path, depth: int) -> Module | None:
        if path in self._parsed:
            return self._parsed[path]
        if depth > MAX_DEPTH or len(self._parsed) >= MAX_MODULES:
            return None
        module = None
        try:
            size = path.stat().st_size
            if size <= MAX_BYTES and self._bytes + size <= MAX_TOTAL_BYTES:
                self._bytes += size
                source = path.read_bytes().decode("utf-8", "replace")
                module = Module(path, source, ast.parse(source), depth)
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            pass  # unreadable or not Python: what it holds stays unknown
        self._parsed[path] = module
        return module

    def _bind(self, tree: ast.Module, directory: Path) -> dict[str, Path | tuple[Path, str]]:
        """Every name the module's imports bind to a file of the project: a module's path, or (path, name)
        for a name imported from one. In the script, imports inside functions count too (a script importing
        where it uses); in the modules it imports, those at their top (under ``if``/``try`` too)."""
        bound: dict[str, Path | tuple[Path, str]] = {}
        for node in (walk(tree) if directory == self.script.parent and tree is self._script_tree else _top_level(tree)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    path = self._find(alias.name, directory, 0)
                    if path is not None:
                        bound[alias.asname or alias.name] = path
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}" if node.module else alias.name
                    path = self._find(node.module, directory, node.level) if node.module else (
                        self._find_package(directory, node.level))
                    submodule = self._find(dotted, directory, node.level)
                    # `from pkg import mod`, unless pkg's __init__ binds `mod` itself (`from .mod import mod`):
                    # Python reads the package's attribute first, so the function shadows the submodule
                    if submodule is not None and not (path is not None and self._package_binds(path, alias.name)):
                        bound[alias.asname or alias.name] = submodule
                        continue
                    if path is not None and alias.name != "*":
                        bound[alias.asname or alias.name] = (path, alias.name)
                    elif path is not None and tree is self._script_tree:
                        bound.update(self._star(path))  # `from core.utils.distributed import *`
        return bound

    def _package_binds(self, path: Path, name: str) -> bool:
        """A package's ``__init__.py`` at ``path`` defines ``name`` or imports it from a module of its own
        (``from .mod import mod``; ``from . import mod`` binds the submodule itself)."""
        if path.name != "__init__.py":
            return False
        module = self._module(path, 1)
        return module is not None and any(
            isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name
            or isinstance(stmt, ast.ImportFrom) and stmt.module is not None
            and any((a.asname or a.name) == name for a in stmt.names)
            for stmt in module.tree.body)

    def star_modules(self) -> dict[str, str]:
        """The standard-library modules that the script's ``from <project module> import *`` binds (name → module):
        a star import binds every public name of the module, the modules it imports included, unless its
        ``__all__`` lists others; followed through those modules' own star imports (Uni3D's main.py calls
        ``logging.info`` with ``logging`` from ``from data.datasets import *`` → ``from .utils.logger import *``
        → ``import logging``)."""
        found: dict[str, str] = {}
        seen: set[Path] = set()

        def follow(tree: ast.Module, directory: Path, depth: int) -> None:
            for node in _top_level(tree):
                if not (isinstance(node, ast.ImportFrom) and node.module and any(a.name == "*" for a in node.names)):
                    continue
                path = self._find(node.module, directory, node.level)
                module = None if path is None or path in seen or depth > 3 else self._module(path, 1)
                if module is None:
                    continue
                seen.add(path)
                public = _declared_all(module.tree)
                for stmt in _top_level(module.tree):
                    for alias in stmt.names if isinstance(stmt, ast.Import) else []:
                        name = alias.asname or alias.name.split(".")[0]
                        if (alias.name.split(".")[0] in sys.stdlib_module_names and not name.startswith("_")
                                and (public is None or name in public)):
                            found.setdefault(name, alias.name if alias.asname else name)
                follow(module.tree, path.parent, depth + 1)

        follow(self._script_tree, self.script.parent, 0)
        return found

    def _star(self, path: Path) -> dict[str, tuple[Path, str]]:
        """What ``from module import *`` binds of a module of the project: the public functions it defines."""
        module = self._module(path, 1)
        if module is None:
            return {}
        names = [stmt.name for stmt in module.tree.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and not stmt.name.startswith("_")]
        return {name: (path, name) for name in names}

    def _find(self, dotted: str, directory: Path, level: int) -> Path | None:
        """The file of module ``dotted``: relative to ``directory`` for a relative import, else in the
        search path (a standard-library name only from the script's own directory)."""
        parts = dotted.split(".")
        if level:
            base = self._package_base(directory, level)
            return None if base is None else _module_file(base, parts)
        for place in self._search:
            if place not in self._first and parts[0] in sys.stdlib_module_names:
                return None
            found = _module_file(place, parts)
            if found is not None:
                return found
        return None

    def _find_package(self, directory: Path, level: int) -> Path | None:
        """``from . import name``: the package's ``__init__.py``."""
        base = self._package_base(directory, level)
        init = base / "__init__.py" if base is not None else None
        return init if init is not None and init.is_file() else None

    def _package_base(self, directory: Path, level: int) -> Path | None:
        base = directory
        for _ in range(level - 1):
            base = base.parent
        return base if base == self._search[-1] or self._search[-1] in base.parents else None


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's statements outside functions and classes, those in ``if``/``try`` blocks included."""
    found, pending = [], list(tree.body)
    while pending:
        stmt = pending.pop()
        found.append(stmt)
        if isinstance(stmt, (ast.If, ast.Try)):
            pending += stmt.body + stmt.orelse + getattr(stmt, "finalbody", []) + [
                s for handler in getattr(stmt, "handlers", []) for s in handler.body]
    return found


def _module_file(place: Path, parts: list[str]) -> Path | None:
    """``place/a/b.py`` or ``place/a/b/__init__.py`` for ``a.b``."""
    target = place.joinpath(*parts)
    for candidate in (target.with_name(target.name + ".py"), target / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _declared_all(tree: ast.Module) -> set[str] | None:
    """The names a module's ``__all__ = [...]`` lists (what its star import binds), None without one."""
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets)
                and isinstance(stmt.value, (ast.List, ast.Tuple))):
            return {e.value for e in stmt.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return None
