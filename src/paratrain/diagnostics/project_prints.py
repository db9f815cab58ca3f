"""Where a call of the script into its own project prints in every process that makes it.

    prints = ProjectPrints(imports, builders)
    prints.reached("make_dataloader")   # (module, the print call) or None

A callee as the script writes it is followed to the project's code: a function (``make_dataloader(cfg)``,
``utils.load_checkpoint(...)``), a class built (``SimpleImageDataset(...)``: its ``__init__``), a method of
a project class (``UNet3DConditionModel.from_pretrained_2d(...)``) or of an object the script built from one
(:class:`~paratrain.diagnostics.project_builders.ProjectBuilders`). From there the calls it makes are followed
``_HOPS`` calls deeper, into functions of the same module or of the project, classes built (their
``__init__``), methods of the same object (``self.m()``).

Invariant: a print is reported only when every step from the script's call to it runs in every process
that makes the call: no step is under an ``if`` testing a rank, a main process, verbosity or debugging, or
after an ``if`` that may return, none is in a last ``else`` (a fallback; an ``elif`` is a choice), a block that gives up (``raise``, a bare
``return``, an exit), an ``except`` block or a nested function, no function on the way is
decorated (a decorator may run it on rank 0 only) or named for a rank, and the print is the builtin one
(its module neither defines nor imports nor assigns a ``print``, and no DeiT-style ``init_distributed_mode`` /
``setup_for_distributed`` call before it in its function replaced it), to the console (no ``file=`` other than
``sys.stdout``/``sys.stderr``), with a text that does not name its rank. Anything else is an unknown, and
unknowns are left out. Bounded: at most ``_MAX_FUNCTIONS`` functions read per call, none longer than
``_LONGEST`` lines.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

from paratrain.diagnostics.argument_needs import runs_when_called
from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.check_output import rank_tagged
from paratrain.diagnostics.dead_code import constant_false
from paratrain.diagnostics.project_builders import ProjectBuilders
from paratrain.diagnostics.print_silencing import PRINT_SILENCING_HELPERS
from paratrain.diagnostics.project_imports import Module, ProjectImports
from paratrain.diagnostics.tree_walk import children, walk

_HOPS = 2  # calls followed past the one the script makes: a print three functions deep is found
_MAX_FUNCTIONS = 24
_LONGEST = 200
# An `if` (or `while`) whose test names one of these chooses who prints: a rank, the main process, verbosity;
# or what the installed torch lacks (`self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")`,
# then `if not self.flash: print("WARNING: using slow attention...")`): a warning for another install, not for
# this run's processes.
_INSTALL_PROBE = r"hasattr\(\s*torch\b|torch\.__version__"
_CHOOSING = re.compile(r"rank|main|master|primary|process_index|gpu|local|verbose|verbosity|debug|quiet|silent|log|"
                       + _INSTALL_PROBE, re.IGNORECASE)
_OWN_PRINT = re.compile(r"^\s*(?:def\s+print\b|print\s*=|(?:builtins|__builtin__)\.print\s*=|from\s.*\bimport\b.*\bprint\b)",
                        re.MULTILINE)
_CONSOLE = re.compile(r"(?:sys\.)?std(?:out|err)")
_Function = ast.FunctionDef | ast.AsyncFunctionDef
_Step = tuple[Module, _Function, tuple[Module, ast.ClassDef] | None]  # the function, the instance's class
# (the function's module, its prints, its other calls, each run whenever it runs) → the call to report, or None
Picker = Callable[[Module, list[ast.Call], list[ast.Call]], "ast.Call | None"]


class ProjectPrints:
    """The prints one script's project calls reach in every process (see the module's docstring)."""

    def __init__(self, imports: ProjectImports, builders: ProjectBuilders) -> None:
        self.imports = imports
        self.builders = builders
        self.classes = builders.classes
        # id of a function → (the function, its prints and calls in every process): both readers ask for the same
        self._unguarded_in: dict[int, tuple[ast.AST, tuple[list[ast.Call], list[ast.Call]]]] = {}

    def reached(self, callee: str, made: list[ast.Call] = ()) -> tuple[Module, ast.Call] | None:
        """The first print (in the order the calls are followed) that calling ``callee`` runs in every
        process; None when there is none or it cannot be proved. ``made``: the script's calls of ``callee``
        (a print that runs only when given an argument none of them passes is left out)."""
        return self.reached_by(callee, lambda module, prints, _calls: next(
            (p for p in prints if _builtin_console_print(module, p)), None), made)

    def reached_by(self, callee: str, pick: Picker, made: list[ast.Call] = ()) -> tuple[Module, ast.Call] | None:
        """As :meth:`reached`, for the first call that ``pick`` chooses among the prints and the other calls
        a function on the way runs in every process (a logging line, :mod:`~paratrain.diagnostics.project_logs`)."""
        try:
            return self._reached(callee, pick, list(made))
        except RecursionError:  # a pathologically nested expression: unknown
            return None

    def every_reached_in(self, callee: str, path: Path, made: list[ast.Call] = ()) -> list[ast.Call]:
        """Every print of the module at ``path`` that calling ``callee`` runs in every process (as :meth:`reached`
        finds its first, on every path it follows)."""
        found: list[ast.Call] = []

        def collect(module: Module, prints: list[ast.Call], _calls: list[ast.Call]) -> None:
            if module.path == path:
                found.extend(p for p in prints if _builtin_console_print(module, p) and p not in found)

        self.reached_by(callee, collect, made)
        return found

    def _reached(self, callee: str, pick: Picker, made: list[ast.Call]) -> tuple[Module, ast.Call] | None:
        start = self._entry(callee)
        if start is None:
            return None
        seen = {id(start[1])}
        # each function, and the calls into it: one on the way, or the script's own
        frontier: list[tuple[_Step, list[ast.Call]]] = [(start, made)]
        for hop in range(_HOPS + 1):
            following: list[tuple[_Step, list[ast.Call]]] = []
            for (module, function, owner), via in frontier:
                if _chooses(function) or _too_long(function):
                    continue
                prints, calls = self._unguarded(function)
                if via:  # what runs only when given an argument that every call into it leaves at its default
                    prints = [node for node in prints if any(runs_when_called(function, node, c) for c in via)]
                    calls = [node for node in calls if any(runs_when_called(function, node, c) for c in via)]
                quieted = min((c.lineno for c in calls if last_name(c) in PRINT_SILENCING_HELPERS), default=None)
                if quieted is not None:  # dust3r's train(): `misc.init_distributed_mode(args)` (croco's, unread) first
                    prints = [node for node in prints if node.lineno < quieted]
                    calls = [node for node in calls if node.lineno < quieted]
                found = pick(module, prints, calls)
                if found is not None:
                    return module, found
                if hop == _HOPS:
                    continue
                for call in calls:
                    step = self._called(module, owner, call)
                    if step is not None and id(step[1]) not in seen and len(seen) < _MAX_FUNCTIONS:
                        seen.add(id(step[1]))
                        following.append((step, [call]))
            frontier = following
        return None

    def _unguarded(self, function: ast.AST) -> tuple[list[ast.Call], list[ast.Call]]:
        known = self._unguarded_in.get(id(function))
        if known is None or known[0] is not function:
            known = self._unguarded_in[id(function)] = (function, _unguarded(function))
        return known[1]

    def _entry(self, callee: str) -> _Step | None:
        found = self.imports.definition(callee)
        if found is not None:
            return self._definition_step(*found)
        owner, _, name = callee.rpartition(".")
        cls = self.imports.definition(owner) if owner else None
        if cls is not None and isinstance(cls[1], ast.ClassDef):  # `Model.from_pretrained_2d(...)`
            method = self.classes.method(cls[0], cls[1], name)
            return None if method is None else (method[0], method[1], (cls[0], cls[1]))
        method = self.builders.method(callee)  # `trainer.fit(...)` of an object built from a project class
        return None if method is None else (method[0], method[1], None)

    def _definition_step(self, module: Module, node: ast.AST) -> _Step | None:
        if isinstance(node, ast.ClassDef):  # building one runs its __init__
            method = self.classes.method(module, node, "__init__")
            return None if method is None else (method[0], method[1], (module, node))
        return (module, node, None) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None

    def _called(self, module: Module, owner: tuple[Module, ast.ClassDef] | None, call: ast.Call) -> _Step | None:
        """The project function ``call`` (inside a function of ``module``) runs, or None."""
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            if owner is None:
                return None
            method = self.classes.method(owner[0], owner[1], func.attr)
            return None if method is None else (method[0], method[1], owner)
        if not isinstance(func, (ast.Name, ast.Attribute)):
            return None
        name = ast.unparse(func)
        own = [s for s in module.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               and s.name == name]
        found = (module, own[-1]) if own else self.imports.definition(name, within=module)
        return None if found is None else self._definition_step(*found)


def _chooses(function: _Function) -> bool:
    """Decorated (``@rank_zero_only``, ``@master_only``) or named for a rank (``print_rank_0``, ``log_main``)."""
    return bool(function.decorator_list) and not all(
        last_name(d) in ("classmethod", "staticmethod", "property") for d in function.decorator_list
    ) or bool(re.search(r"rank|master|main", function.name, re.IGNORECASE))


def _too_long(function: _Function) -> bool:
    return (function.end_lineno or function.lineno) - function.lineno > _LONGEST


def _unguarded(function: _Function) -> tuple[list[ast.Call], list[ast.Call]]:
    """The prints and the other calls of ``function``'s own body that run whenever it runs: in line order,
    none under a choosing test or after an ``if`` that may return, in the last ``else`` of a test (a fallback), in a
    block that gives up (ends in ``raise``, a bare return, an exit), in an ``except`` block or a nested
    function; calls given a chosen flag are left out."""
    prints: list[ast.Call] = []
    calls: list[ast.Call] = []
    returned_early = [False]
    flags = _flags(function)

    def visit(node: ast.AST) -> None:
        if returned_early[0] or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                                                  ast.ExceptHandler)):
            return
        if isinstance(node, (ast.If, ast.While)) and constant_false(node.test):
            for part in node.orelse:  # `if False:` (PixArt's IDDPM): its body never runs
                visit(part)
            return
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) and _chosen(node.test, flags):
            if isinstance(node, ast.If) and any(isinstance(n, (ast.Return, ast.Raise)) for n in walk(node)):
                returned_early[0] = True  # `if rank != 0: return`: what follows is chosen too
            return
        if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try)) and _bails_out(node.body):
            return  # `print(f"Failed to get ...: {err}"); return None`: a line about this process's failure
        if isinstance(node, ast.If):  # a last `else` is a fallback (`else: print("unknown vocoder, using ...")`)
            elif_ = node.orelse if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) else []
            for part in (node.test, *node.body, *elif_):
                visit(part)
            # `if os.path.exists(path): return path` (another rank made it first): what follows may not run
            returned_early[0] |= any(isinstance(n, ast.Return) for n in walk(node))
            return
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "print":
                prints.append(node)
            elif not any(isinstance(n, (ast.Name, ast.Attribute)) and ast.unparse(n) in flags
                         for arg in _arguments(node) for n in walk(arg)):
                calls.append(node)  # one given a chosen flag (`set_weight_decay(..., echo=echo)`) is chosen too
        for child in children(node):
            visit(child)
        if isinstance(node, (ast.Return, ast.Raise)):
            returned_early[0] = True  # what follows it in the function runs on some other path, or never

    for stmt in function.body:
        visit(stmt)
    return prints, calls


def _flags(function: _Function) -> set[str]:
    """Names and attributes the function assigns from a choosing value (``echo = config.LOCAL_RANK == 0``,
    ``self.flash = hasattr(torch.nn.functional, ...)``): a test of one alone chooses too (``if echo:``)."""
    names: set[str] = set()
    for node in walk(function):
        value = ast.unparse(node.value) if isinstance(node, ast.Assign) else ""
        if value and _CHOOSING.search(value):
            # an attribute only from a probe of the install: `args.distributed = args.num_gpus > 1` is no choice
            # of who prints, and `if args.distributed:` runs on every rank of a distributed run
            kinds = (ast.Name, ast.Attribute) if re.search(_INSTALL_PROBE, value) else ast.Name
            names.update(ast.unparse(t) for target in node.targets for t in walk(target) if isinstance(t, kinds))
    return names


def _chosen(test: ast.expr, flags: set[str]) -> bool:
    """The test names a rank, the main process, verbosity; or is a flag of ``flags`` alone (``if not quiet:``), or
    one part of an ``and`` is (Music-Source-Separation-Training's ``if len(found) == 0 and should_print:``)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and any(_chosen(v, flags) for v in test.values):
        return True
    bare = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
    return bool(_CHOOSING.search(ast.unparse(test))) or isinstance(bare, (ast.Name, ast.Attribute)) and ast.unparse(bare) in flags


def _bails_out(body: list[ast.stmt]) -> bool:
    """The block ends by giving up: ``raise``, ``return``/``return None``, ``sys.exit(...)``/``exit()``."""
    last = body[-1] if body else None
    return isinstance(last, ast.Raise) or isinstance(last, ast.Return) and (
        last.value is None or isinstance(last.value, ast.Constant) and last.value.value is None) or (
        isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and last_name(last.value) in ("exit", "_exit"))


def _arguments(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(kw.value for kw in call.keywords)]


def _builtin_console_print(module: Module, call: ast.Call) -> bool:
    if "print" in module.source and _OWN_PRINT.search(module.source):
        return False
    target = next((kw.value for kw in call.keywords if kw.arg == "file"), None)
    if target is not None and not _CONSOLE.fullmatch(ast.unparse(target)):
        return False
    return not rank_tagged(call)
