"""Where a call of the script into its own project logs in every process that makes it, to the console.

    logs = ProjectLogs(imports, prints, helper_kind)
    logs.reached("utils.load_checkpoint")   # (module, the logging call, how it is heard) or None
    root_verbose_at_import(imports)          # a project module runs logging.basicConfig(level=INFO) at import

The calls are followed as :class:`~paratrain.diagnostics.project_prints.ProjectPrints` follows them for prints,
with the same guards on the way. A line counts when it is ``X.info(...)`` or ``X.debug(...)``, its text naming no
rank, with ``X`` a logger of its module: ``logging`` itself, or a name the module binds at its top (or rebinds
under ``global`` in one of its functions) to

* ``logging`` or ``logging.getLogger(...)`` with no ``propagate = False`` and no level above INFO set on it in the
  module: it writes through the root logger (``"root"``), so it is heard where the root logger is set to
  INFO with a console handler in every process — by a ``logging.basicConfig`` run at import of a project module
  (glow-tts's and RVC's ``utils.py``) or by the script, under no rank test (the rule asks); one the module sets to
  INFO or DEBUG itself at its top (MeZO's ``logger.setLevel(logging.INFO)``) makes its records whatever the root's
  level, and the root's handler writes them (``"level"``): heard wherever that handler is in every process;
* ``logging.get_logger(__name__)`` of transformers or diffusers (``from diffusers.utils import logging``), as
  ``logging.getLogger(__name__)``: that ``get_logger`` only sets up the library's own root logger
  ("transformers", "diffusers", which the library's ``set_verbosity_*`` quieten) and returns
  ``logging.getLogger(name)``; a project module's name is outside that hierarchy, so its lines go to the root
  logger like any other (Moore-AnimateAnyone's ``src/models/unet_3d.py``). Not for a module inside a folder named
  for the library (a vendored copy, whose ``__name__`` may be in the hierarchy);
* what a project helper returns that gives the logger a verbose level and a console handler in every process
  (OpenRLHF's ``init_logger``, whose handler its module makes at import).

Invariant: a logging line is reported only when every step from the script's call to it runs in every process
(ProjectPrints' invariant) and its logger is proved to write INFO to the console in each; any other logger (one
made elsewhere, given a level from a variable, chosen by rank) is an unknown, and unknowns are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.check_logs import VERBOSE_LEVEL, verbose_console_setup
from paratrain.diagnostics.check_output import rank_tagged
from paratrain.diagnostics.project_imports import Module, ProjectImports
from paratrain.diagnostics.project_prints import ProjectPrints
from paratrain.diagnostics.tree_walk import walk

_LINES = ("info", "debug")  # what the default WARNING level drops: heard only where a setup made it verbose
# (a function's module, the call of a project helper that makes the logger) → "every" when it gives a verbose
# level and a console handler in every process, anything else when not or unknown
HelperKind = Callable[[Module, ast.Call], str | None]


class ProjectLogs:
    """The logging lines one script's project calls reach in every process (see the module's docstring)."""

    def __init__(self, imports: ProjectImports, prints: ProjectPrints, helper_kind: HelperKind) -> None:
        self.imports = imports
        self.prints = prints
        self.helper_kind = helper_kind
        self._loggers: dict[int, dict[str, str]] = {}  # per module: logger name → how it is heard

    def reached(self, callee: str, made: list[ast.Call] = ()) -> tuple[Module, ast.Call, str] | None:
        """The first logging line that calling ``callee`` runs in every process, and how it is heard (``"root"``:
        only where the root logger is verbose; ``"level"``: where it has a console handler; ``"own"``: always);
        None when there is none or it is unknown.
        ``made``: the script's calls of ``callee``, as :meth:`ProjectPrints.reached` takes them."""
        found = self.prints.reached_by(callee, self._pick, made)
        if found is None:
            return None
        module, call = found
        return module, call, self._loggers_of(module)[ast.unparse(call.func.value)]

    def every_reached_in(self, callee: str, path: Path, made: list[ast.Call] = ()) -> list[tuple[ast.Call, str]]:
        """Every logging line of the module at ``path`` that calling ``callee`` runs in every process, with how it is
        heard (as :meth:`reached` finds the first, on every path it follows)."""
        found: list[tuple[ast.Call, str]] = []

        def collect(module: Module, _prints: list[ast.Call], calls: list[ast.Call]) -> None:
            if module.path != path:
                return
            loggers = self._loggers_of(module)
            found.extend((call, loggers[ast.unparse(call.func.value)]) for call in calls
                         if isinstance(call.func, ast.Attribute) and call.func.attr in _LINES and not rank_tagged(call)
                         and ast.unparse(call.func.value) in loggers and all(call is not seen for seen, _ in found))

        self.prints.reached_by(callee, collect, made)
        return found

    def _pick(self, module: Module, _prints: list[ast.Call], calls: list[ast.Call]) -> ast.Call | None:
        loggers = None
        for call in calls:
            if not (isinstance(call.func, ast.Attribute) and call.func.attr in _LINES) or rank_tagged(call):
                continue
            loggers = self._loggers_of(module) if loggers is None else loggers
            if ast.unparse(call.func.value) in loggers:
                return call
        return None

    def _loggers_of(self, module: Module) -> dict[str, str]:
        """The module's loggers that write INFO in every process: name → how it is heard."""
        if id(module) not in self._loggers:
            self._loggers[id(module)] = self._read_loggers(module)
        return self._loggers[id(module)]

    def _read_loggers(self, module: Module) -> dict[str, str]:
        logging_names = _logging_aliases(module.tree)
        library = _library_logging_aliases(module) - logging_names
        found = {name: "root" for name in logging_names}
        for name, values in module_bindings(module.tree).items():
            kinds = {self._kind(module, value, logging_names, library) for value in values}
            if None in kinds or not kinds:
                continue
            if "root" not in kinds:
                found[name] = "own"
            elif _left_to_root(module, name):
                found[name] = "level" if len(values) == 1 and _verbose_of_its_own(module, name) else "root"
        return found

    def _kind(self, module: Module, value: ast.expr, logging_names: set[str], library: set[str]) -> str | None:
        if isinstance(value, ast.Name) and value.id in logging_names:  # `logger = logging`
            return "root"
        if not isinstance(value, ast.Call) or not isinstance(value.func, (ast.Name, ast.Attribute)):
            return None
        func = ast.unparse(value.func)
        if func.rpartition(".")[0] in logging_names and last_name(value) == "getLogger":
            return "root"
        if (func.rpartition(".")[0] in library and last_name(value) == "get_logger" and not value.keywords
                and len(value.args) == 1 and isinstance(value.args[0], ast.Name) and value.args[0].id == "__name__"):
            return "root"  # transformers' / diffusers' get_logger(__name__) of a project module
        return "own" if self.helper_kind(module, value) == "every" else None


def root_verbose_at_import(imports: ProjectImports) -> bool:
    """A module of the project read runs, at its top, ``logging.basicConfig`` at INFO or DEBUG to the console:
    every process that imports it logs INFO lines of loggers that reach the root logger."""
    return any(verbose_console_setup(stmt.value) for module in imports.modules() for stmt in module.tree.body
               if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call))


_LIBRARY_LOGGING = ("transformers", "diffusers")  # their utils.logging.get_logger(name) is logging.getLogger(name)


def _library_logging_aliases(module: Module) -> set[str]:
    """Names the module binds at its top to ``transformers.utils.logging`` or ``diffusers.utils.logging``
    (``from diffusers.utils import logging``, ``import transformers.utils.logging as hf_logging``); none for a
    module inside a folder named for one of the libraries (a vendored copy)."""
    if any(part in _LIBRARY_LOGGING for part in module.path.parts[:-1]):
        return set()
    names = set()
    for stmt in module.tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module in {f"{lib}.utils" for lib in _LIBRARY_LOGGING}:
            names |= {alias.asname or alias.name for alias in stmt.names if alias.name == "logging"}
        elif isinstance(stmt, ast.Import):
            names |= {alias.asname for alias in stmt.names if alias.asname
                      and alias.name in {f"{lib}.utils.logging" for lib in _LIBRARY_LOGGING}}
    return names


def _logging_aliases(tree: ast.Module) -> set[str]:
    return {alias.asname or alias.name for stmt in tree.body if isinstance(stmt, ast.Import)
            for alias in stmt.names if alias.name == "logging"}


def module_bindings(tree: ast.Module) -> dict[str, list[ast.expr]]:
    """Names bound at the module's top by a plain assignment, with what functions declaring them ``global``
    assign them too (RVC's ``get_logger`` rebinds the module's ``logger``)."""
    bound: dict[str, list[ast.expr]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            bound.setdefault(stmt.targets[0].id, []).append(stmt.value)
    for function in (n for n in walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        shared = {name for node in walk(function) if isinstance(node, ast.Global) for name in node.names}
        for node in walk(function):
            if (shared and isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id in shared & set(bound)):
                bound[node.targets[0].id].append(node.value)
    return bound


def _verbose_of_its_own(module: Module, name: str) -> bool:
    """The module sets ``name`` to INFO or DEBUG at its top, and that is all it sets of it (its one ``setLevel``,
    no handler, filter or ``propagate`` of its own: :func:`_left_to_root` rules out a higher level)."""
    top = [stmt.value for stmt in module.tree.body if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
           and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "setLevel"
           and ast.unparse(stmt.value.func.value) == name and stmt.value.args
           and VERBOSE_LEVEL.search(ast.unparse(stmt.value.args[0]))]
    touched = [node for node in walk(module.tree) if isinstance(node, ast.Attribute) and ast.unparse(node.value) == name
               and node.attr in ("setLevel", "addHandler", "handlers", "propagate", "disabled", "addFilter")]
    return len(top) == 1 and len(touched) == 1


def _left_to_root(module: Module, name: str) -> bool:
    """The module neither stops ``name`` propagating to the root logger nor sets it a level above INFO."""
    for node in walk(module.tree):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == f"{name}.propagate" for t in node.targets):
            return False
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setLevel"
                and ast.unparse(node.func.value) == name
                and not (node.args and VERBOSE_LEVEL.search(ast.unparse(node.args[0])))):
            return False
    return True
