"""What the functions a script calls from its own project do, read from their files for the pitfall rules.

    facts = ScriptFacts.read(source)
    facts.learn(read_project_facts(facts, Path("train.py")))

Each function the script calls that :class:`~paratrain.diagnostics.project_imports.ProjectImports` finds in
the project is read with the same reading as the script (a :class:`ScriptFacts` of its module), for what the
rules ask of a function of the script itself: does it return a rank test, a DistributedSampler, a DDP
wrapper; does it call ``torch.save`` with no rank test of its own; does it give the logger an INFO level and
a console handler on every rank, or choose them by rank; does it replace ``builtins.print``; does it read
``--local_rank`` or ``LOCAL_RANK``; does it make the process group; does it print only under a test of a rank
parameter (``print_rank_0(msg, rank)``). Which parameters of the imported modules' functions become
``MASTER_PORT``/``MASTER_ADDR`` is read from every module found. The functions it calls in turn are
followed two calls deep for the last four. Only what its body shows counts: a decorated saver (the decorator may
test the rank), a tuple of wrappers, a level from a variable, are unknowns, and unknowns are left out.
"""

from __future__ import annotations

import ast
from typing import Any
from dataclasses import dataclass
from pathlib import Path

from paratrain.diagnostics.assigned_values import assigned_in, returned_calls
from paratrain.diagnostics.argument_needs import call_positions, needed_arguments
from paratrain.diagnostics.check_rendezvous import environ_parameters
from paratrain.diagnostics.check_wrappers import WRAPPERS
from paratrain.diagnostics.importing_entry_points import levels_chosen_by_an_importer
from paratrain.diagnostics.imported_names import ImportedNames
from paratrain.diagnostics.library_calls import returns_main_process_logger
from paratrain.diagnostics.project_attribute_saves import AttributeSaves
from paratrain.diagnostics.project_builders import ProjectBuilders
from paratrain.diagnostics.project_checkpoints import ProjectCheckpoints
from paratrain.diagnostics.project_imports import Module, ProjectImports
from paratrain.diagnostics.project_loaders import loader_bindings
from paratrain.diagnostics.project_logs import ProjectLogs, root_verbose_at_import
from paratrain.diagnostics.project_loggers import (
    chooses_by_rank,
    console_handler_of_module,
    level_parameter,
    makes_logger,
    returned_index,
    tags_the_rank,
    to_console,
    verbose_level,
    verbose_text,
)
from paratrain.diagnostics.project_local_rank import (
    attributes_read_before_set,
    attributes_tested_then_stored,
    local_rank_flag,
    reads_local_rank_env,
)
from paratrain.diagnostics.project_rendezvous import fixed_rendezvous_calls
from paratrain.diagnostics.project_norms import ProjectNorms
from paratrain.diagnostics.project_prints import ProjectPrints
from paratrain.diagnostics.project_savers import stored_rank_flags
from paratrain.diagnostics.print_silencing import open_above
from paratrain.diagnostics.project_wrapped_saves import might_save_a_wrapper, wrapped_save
from paratrain.diagnostics.rank_argument_prints import prints_by_rank_argument
from paratrain.diagnostics.script_facts import ScriptFacts, keyword, last_name, returned_module, returned_test_kind
from paratrain.diagnostics.syncbn_conversion import SYNCBN, off_by_default, syncbn_converts
from paratrain.diagnostics.tree_walk import walk

_SAMPLERS = ("DistributedSampler",)
_GROUP_CALLS = ("init_process_group", "DistributedDataParallel")
# `addFilter(lambda _: rank == 0)`: mace's setup_logger drops every record off rank 0 (a filter naming the rank chooses)
_LOG_SETUPS = ("basicConfig", "setLevel", "addHandler", "StreamHandler", "set_verbosity", "disable", "addFilter")
_PRINT_TARGETS = ("builtins.print", "__builtin__.print", "sys.stdout")
_DDP = ("DistributedDataParallel", "DDP")
_HOPS = 2  # calls followed inside the project from a function the script calls
# A function longer than this is a program's body (a `train()`), not a helper: not read, which keeps a
# check within its time on projects of large files.
_LONGEST = 200
_Function = ast.FunctionDef | ast.AsyncFunctionDef


def read_project_facts(facts: ScriptFacts, script: Path, guards_only: bool = False) -> ImportedNames:
    """The facts about every project function ``facts``'s script calls (see the module's docstring). With
    ``guards_only``, what the script's rank tests, process starts and print silencing need, without the prints, logs
    and norms its project functions reach (for a file read to ask how it calls another, not checked itself)."""
    return _Reader(ProjectImports(script, facts.tree)).read(facts, guards_only)


def lines_reached_in(importer: ScriptFacts, imports: ProjectImports, module: Path,
                     made: dict[str, list[ast.Call]]) -> dict[int, tuple[str, str]]:
    """The lines of ``module``'s prints and logging calls that ``importer``'s calls ``made`` (callee as written → its
    calls; ``imports``, the importer's) run in every process, as the importer's own check follows them: each with the
    first callee that reaches it and ``"print"``, or how the logging line is heard
    (:class:`~paratrain.diagnostics.project_logs.ProjectLogs`)."""
    reader = _Reader(imports)
    prints = ProjectPrints(imports, ProjectBuilders(imports, importer))
    logs = ProjectLogs(imports, prints, reader._helper_kind)
    found: dict[int, tuple[str, str]] = {}
    for callee, calls in made.items():
        for call in prints.every_reached_in(callee, module, calls):
            found.setdefault(call.lineno, (callee, "print"))
        for call, how in logs.every_reached_in(callee, module, calls):
            found.setdefault(call.lineno, (callee, how))
    return found


@dataclass(frozen=True)
class _Does:
    """What one function of the project does, as far as the facts of a call that reaches it go."""

    calls_a_logger: bool  # a call whose name contains `log`
    wraps_in_ddp: bool
    sets_levels_by_rank: bool
    joins_process_group: bool
    replaces_print: bool  # builtins.print or sys.stdout assigned
    print_open_above: int | None  # the job size above which its replaced print prints on every rank (MAE's)
    reads_local_rank_env: bool
    attributes_read: set[str]  # read before it sets them
    attributes_stored: set[str]
    attributes_read_then_stored: set[str]


class _Reader:
    """One script's reading of its project: each module's :class:`ScriptFacts` made once, when first needed."""

    def __init__(self, imports: ProjectImports) -> None:
        self.imports = imports
        self._facts: dict[Path, ScriptFacts] = {}
        self._checkpoints = ProjectCheckpoints(self.facts_of, set())  # made for each script read
        # id of a reached function → (the function, what it does): read once, though many callees reach it
        self._done_by: dict[int, tuple[_Function, _Does]] = {}

    def read(self, facts: ScriptFacts, guards_only: bool = False) -> ImportedNames:
        """What every call of the script to a project function tells (keyed by the callee as written)."""
        names = ImportedNames()
        self._checkpoints = ProjectCheckpoints(self.facts_of, stored_rank_flags(facts))
        builders = ProjectBuilders(self.imports, facts)
        self._attribute_saves = AttributeSaves(self.imports, builders.classes, self._checkpoints)
        prints = ProjectPrints(self.imports, builders)
        logs = ProjectLogs(self.imports, prints, self._helper_kind)
        made: dict[str, list[ast.Call]] = {}
        for call in facts.calls:
            if isinstance(call.func, (ast.Name, ast.Attribute)):
                made.setdefault(ImportedNames.callee(call), []).append(call)
        for callee in sorted(made):
            printed = None if guards_only else prints.reached(callee, made[callee])
            if printed is not None:
                names.every_rank_prints[callee] = (self.imports.shown(printed[0]), printed[1].lineno)
            logged = None if guards_only else logs.reached(callee, made[callee])
            if logged is not None:
                names.every_rank_logs[callee] = (self.imports.shown(logged[0]), logged[1].lineno, logged[2])
            if builders.wraps_in_data_parallel(callee):
                names.data_parallel_makers.add(callee)
            found = self.imports.definition(callee) or builders.method(callee)  # `train_state.save(...)`
            owner, _, method = callee.rpartition(".")
            if found is not None and owner and not isinstance(found[1], ast.ClassDef):
                self._learn_attribute_saves(names, callee, builders.classes_of(owner), method)
            flag = local_rank_flag(found[1], found[0].tree) if found is not None else None  # a parser, or its class
            if flag is not None:
                names.local_rank_flags[callee] = flag
            if found is not None and isinstance(found[1], ast.ClassDef):
                base = _wrapper_base(*found)
                if base is not None:
                    names.wrapper_classes[callee] = base
                logger = logger_class_kind(*found)
                if logger == "rank":
                    names.rank_aware_loggers.add(callee)
                elif logger == "every":
                    names.every_rank_loggers[callee] = None
                continue
            if found is None:
                continue
            if _too_long(found[1]):
                continue
            self._learn(names, callee, *found)
        names.root_verbose_at_import = root_verbose_at_import(self.imports)
        names.star_modules = self.imports.star_modules()
        names.levels_chosen_by_importer = levels_chosen_by_an_importer(self.imports.script)
        names.loader_bindings = loader_bindings(self.imports, facts)
        names.fixed_rendezvous = fixed_rendezvous_calls(self.imports, facts)
        if not guards_only:
            self._learn_norms(names, facts)
        # A module's own statements run when it is imported (`args.gpu = int(os.environ["LOCAL_RANK"])` at its
        # top; DLRM's extend_distributed sets `builtins.print = rank0_print` there).
        imported = [stmt for module in self.imports.modules() for stmt in module.tree.body
                    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        names.reads_local_rank_env |= any(reads_local_rank_env(stmt) for stmt in imported)
        names.print_replaced_at_import = any(_replaces_print(stmt) for stmt in imported)
        names.print_replaced |= names.print_replaced_at_import
        # OpenPCDet's `init_dist_slurm(tcp_port, …)` writes `os.environ["MASTER_PORT"] = str(tcp_port)`
        for module in self.imports.modules():
            if "MASTER_" in module.source:
                names.environ_parameters.update(environ_parameters(self.facts_of(module)))
        return names

    def _learn_attribute_saves(self, names: ImportedNames, callee: str, classes: list, method: str) -> None:
        """``exp.train(...)`` saves the state dict of an attribute ``exp``'s construction wrapped in DataParallel
        (:mod:`paratrain.diagnostics.project_attribute_saves`): for every class ``exp`` may be made from."""
        for module, cls in classes:
            saved = self._attribute_saves.wrapped_attribute_save(module, cls, method)
            if saved is not None:
                names.wrapper_state_savers.setdefault(callee, (self.imports.shown(saved[0]), saved[1]))
                return

    def _learn_norms(self, names: ImportedNames, facts: ScriptFacts) -> None:
        """Which model builders of the project reach a BatchNorm layer: read only where DDP wraps something
        (in the script or a callee) and no module read converts to SyncBatchNorm."""
        modules = self.imports.modules()
        names.off_options = off_by_default([module.tree for module in modules])
        off = names.off_options | off_by_default([facts.tree])
        names.syncbn_in_project = any(SYNCBN.search(module.source) and syncbn_converts(
            module.tree, module.source.splitlines(), off) for module in modules)
        if names.syncbn_in_project or not (names.ddp_wrappers or facts.calls_named(*_DDP)
                                           or facts.lightning_on_several_devices()):
            return
        norms = ProjectNorms(self.imports)
        # `backbone = get_model(name).cuda()`: the build under the moves chained on it
        built = {ImportedNames.callee(returned_module(value)) for values in facts.assigned.values() for value in values
                 if isinstance(returned_module(value), ast.Call)
                 and isinstance(returned_module(value).func, (ast.Name, ast.Attribute))}
        for callee in sorted(built):
            found = norms.reached(callee)
            if found is not None:
                names.batchnorm_builders[callee] = (self.imports.shown(found[0]), found[1].lineno)

    def facts_of(self, module: Module) -> ScriptFacts:
        if module.path not in self._facts:
            self._facts[module.path] = ScriptFacts.of_tree(module.tree, module.source)
        return self._facts[module.path]

    def _learn(self, names: ImportedNames, callee: str, module: Module, function: _Function) -> None:
        names.read.add(callee)
        kind = returned_test_kind(function)
        if function.name in self.facts_of(module).functions_returning_the_global_rank:
            names.global_rank_getters.add(callee)
        if kind == "global":
            names.rank_tests.add(callee)
        elif kind == "local":
            names.machine_tests.add(callee)
        samplers = returned_calls(function, _SAMPLERS)
        if samplers:
            names.sampler_makers[callee] = samplers
        if returned_calls(function, WRAPPERS):
            names.wrapper_makers.add(callee)
        if returned_calls(function, ("DataParallel",)):
            names.data_parallel_makers.add(callee)
        printer = prints_by_rank_argument(function)
        if printer is not None:
            names.rank_argument_prints[callee] = printer
        if self._checkpoints.saves_once_per_machine(module, function):
            names.machine_savers.add(callee)
        saves = self._checkpoints.unguarded_saves(module, function)
        if saves:
            names.unguarded_savers.add(callee)
            needs = [needed_arguments(function, save) for save in saves]
            if all(needs):  # every save runs only when the call passes an argument: which, the call tells
                names.saver_arguments[callee] = (call_positions(function), needs)
        saved = self._checkpoints.saved_state_dicts(module, function)
        if saved:
            positional = [a.arg for a in function.args.posonlyargs + function.args.args]
            names.state_dict_savers[callee] = (positional[1:] if positional[:1] == ["self"] else positional, saved)
        logger = self._logger_kind(module, function, 0)
        if logger == "rank":
            names.rank_aware_loggers.add(callee)
        elif logger is not None and len(logger) == 3:
            names.loggers_at_callers_level[callee] = (logger[1], *logger[2])
        elif logger is not None:
            names.every_rank_loggers[callee] = logger[1]
        reach = self._reached(module, function)
        does = [self._does(reached) for _, reached in reach]
        if not any(done.calls_a_logger for done in does):
            names.logging_free.add(callee)
        for (owner, reached), done in zip(reach, does):
            if done.wraps_in_ddp:
                names.ddp_wrappers.add(callee)
            # TransReID's `do_train(model, ...)` wraps the model in DDP, then saves `model.state_dict()`
            if callee not in names.wrapper_state_savers and might_save_a_wrapper(owner.source):
                line = wrapped_save(self.facts_of(owner), reached)
                if line is not None:
                    names.wrapper_state_savers[callee] = (self.imports.shown(owner), line)
            if done.sets_levels_by_rank:
                names.rank_aware_loggers.add(callee)
            names.joins_process_group |= done.joins_process_group
            if done.replaces_print:
                names.print_replaced = True
                names.print_replacers.add(callee)
                if done.print_open_above is not None:
                    names.print_open_above = min(size for size in (done.print_open_above, names.print_open_above)
                                                 if size is not None)
            names.reads_local_rank_env |= done.reads_local_rank_env
            names.attributes_read |= done.attributes_read
            names.attributes_stored |= done.attributes_stored
            names.attributes_read_then_stored |= done.attributes_read_then_stored

    def _does(self, reached: _Function) -> _Does:
        """What ``reached`` does, whichever callee of the script reaches it (read once per function)."""
        known = self._done_by.get(id(reached))
        if known is not None and known[0] is reached:
            return known[1]
        nodes = list(walk(reached))
        calls = [node for node in nodes if isinstance(node, ast.Call)]
        setups = [call for call in calls if last_name(call) in _LOG_SETUPS]
        done = _Does(
            calls_a_logger=any("log" in last_name(call).lower() for call in calls),
            wraps_in_ddp=any(last_name(call) in _DDP for call in calls),
            # fairseq's `call_main(cfg, main)` reaches `distributed_init`, which sets the root logger's level
            # by rank (`if is_master(...): setLevel(INFO) else: setLevel(WARNING)`) before `main` logs
            sets_levels_by_rank=bool(setups) and chooses_by_rank(reached, setups),
            # XLM's `init_distributed_mode(params)` makes the process group in slurm.py: the script is distributed
            joins_process_group=any(last_name(call) in _GROUP_CALLS for call in calls),
            replaces_print=_replaces_print(reached),
            print_open_above=open_above(reached) if _replaces_print(reached) else None,
            reads_local_rank_env=reads_local_rank_env(reached),
            attributes_read=attributes_read_before_set(reached),
            attributes_stored={node.attr for node in nodes
                               if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)},
            attributes_read_then_stored=attributes_tested_then_stored(reached),
        )
        self._done_by[id(reached)] = (reached, done)
        return done

    def _reached(self, module: Module, function: _Function) -> list[tuple[Module, _Function]]:
        """``function`` and the project functions it calls, followed ``_HOPS`` calls deep."""
        seen = {id(function)}
        reached, frontier = [(module, function)], [(module, function)]
        for _ in range(_HOPS):
            following = []
            for owner, body in frontier:
                for call in (n for n in walk(body) if isinstance(n, ast.Call)):
                    if not isinstance(call.func, (ast.Name, ast.Attribute)):
                        continue
                    found = self._in_module(owner, ast.unparse(call.func))
                    if found is not None and id(found[1]) not in seen and not _too_long(found[1]):
                        seen.add(id(found[1]))
                        following.append(found)
            reached += following
            frontier = following
        return reached

    def _in_module(self, module: Module, callee: str) -> tuple[Module, _Function] | None:
        """A function of ``module`` itself, or one it imports from the project."""
        for stmt in module.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == callee:
                return module, stmt
        return self.imports.function(callee, within=module)

    def _helper_kind(self, module: Module, call: ast.Call) -> str | None:
        """``"every"`` when the project function ``call`` (in ``module``) runs returns a logger with a verbose
        level and a console handler in every process (``logger = init_logger(__name__)``; one whose level the
        caller gives: when ``call`` passes INFO or DEBUG as written)."""
        found = self._in_module(module, ast.unparse(call.func))
        kind = None if found is None or _too_long(found[1]) else self._logger_kind(*found, 0)
        if not (isinstance(kind, tuple) and kind[1] is None):
            return None
        if len(kind) == 3:  # the level is the call's: verbose only when it passes INFO or DEBUG
            place, name = kind[2]
            given = keyword(call, name) or (call.args[place] if place < len(call.args) else None)
            return "every" if given is not None and verbose_text(ast.unparse(given)) else None
        return "every"

    def _logger_kind(self, module: Module, function: _Function, depth: int) -> str | tuple[Any, ...] | None:
        """``"rank"`` when the function chooses a logging level or handler by rank; ``("every", index)`` when
        it sets a verbose level (INFO, DEBUG) and adds a console handler with no rank test, or returns the
        logger of such a function of the project (``index``: where that logger is in the tuple it returns,
        None for the value itself); ``("every", index, (place, name))`` when it adds the console handler at
        the level its caller passes as that parameter; None otherwise."""
        if not makes_logger(function):
            return None
        if returns_main_process_logger(module.tree, function):
            return "rank"  # accelerate's MultiProcessAdapter: the main process only
        kind = _setup_kind(module, function)
        if isinstance(kind, tuple):
            return ("every", returned_index(function), kind) if depth == 0 else None
        if kind is not None:
            return kind if kind == "rank" else ("every", returned_index(function))
        if depth >= 1:
            return None
        # `logger = create_logger(...)`, then `return logger` (XLM's initialize_exp): the helper's logger.
        for ret in (n for n in walk(function) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)):
            for value in assigned_in(function, ret.value.id):
                if not (isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))):
                    continue
                found = self._in_module(module, ast.unparse(value.func))
                kind = None if found is None or _too_long(found[1]) else self._logger_kind(*found, depth + 1)
                if kind == "rank" or (kind is not None and kind[1] is None):
                    return kind if kind == "rank" else ("every", None)
        return None


def _setup_kind(module: Module, function: _Function) -> str | tuple[int, str] | None:
    """``"rank"`` when ``function`` sets a logging level or handler by rank (or tags each line with it), ``"every"``
    when it sets a verbose level and a console handler with no rank test; the level's parameter (place, name:
    :func:`level_parameter`) when it adds a console handler at the level its caller gives; else None."""
    setups = [node for node in walk(function) if isinstance(node, ast.Call) and last_name(node) in _LOG_SETUPS]
    if chooses_by_rank(function, setups) or tags_the_rank(module, function):
        return "rank"
    console = any(last_name(s) == "StreamHandler" and to_console(s) for s in setups) or any(
        last_name(s) == "basicConfig" and keyword(s, "filename") is None and keyword(s, "handlers") is None
        for s in setups) or any(console_handler_of_module(module, s) for s in setups if last_name(s) == "addHandler")
    leveled = [s for s in setups if last_name(s) in ("setLevel", "basicConfig")]
    if not console:
        return None
    if any(verbose_level(function, s) for s in leveled):
        return "every"
    return next((place for s in leveled for place in [level_parameter(function, s)] if place is not None), None)


def logger_class_kind(module: Module, cls: ast.ClassDef) -> str | None:
    """A logger class of the project (BiRefNet's ``Logger``: its ``__init__`` adds a console handler at INFO to a
    named logger, its ``info`` writes to it): :func:`_setup_kind` of its ``__init__``, for a class named for
    logging that has an ``info`` method; else None. An instance (``logger = Logger(path)``) is then the logger."""
    methods = {node.name: node for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "log" not in cls.name.lower() or "info" not in methods or "__init__" not in methods:
        return None
    return _setup_kind(module, methods["__init__"])


def _wrapper_base(module: Module, cls: ast.ClassDef) -> str | None:
    """The torch wrapper a class of the project derives from (``DataParallel`` or ``DistributedDataParallel``),
    directly or through other classes of its module (CSAIL's ``UserScatteredDataParallel(DictGatherDataParallel)``)."""
    classes = {node.name: node for node in module.tree.body if isinstance(node, ast.ClassDef)}
    seen, current = set(), [cls]
    while current:
        following = []
        for node in current:
            for base in (last_name(b) for b in node.bases):
                if base in ("DataParallel", "DistributedDataParallel"):
                    return base
                if base in classes and base not in seen:
                    seen.add(base)
                    following.append(classes[base])
        current = following
    return None


def _too_long(function: _Function) -> bool:
    return (function.end_lineno or function.lineno) - function.lineno > _LONGEST


def _replaces_print(node: ast.AST) -> bool:
    """``builtins.print = …`` (or ``sys.stdout = …``) within ``node``."""
    return any(isinstance(sub, ast.Assign) and any(ast.unparse(t) in _PRINT_TARGETS for t in sub.targets)
               for sub in walk(node))
