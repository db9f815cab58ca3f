"""What the pitfall rules need to know about a script, read once from its syntax tree.

Static and approximate on purpose: names are matched by their last part
(``torch.utils.data.DataLoader`` and ``DataLoader`` are the same, :mod:`~paratrain.diagnostics.call_names`),
values are followed through every form of binding a name (:mod:`~paratrain.diagnostics.assigned_values`),
not through calls. :class:`ScriptFacts` holds the file's calls,
assignments, imports and parents, and answers which processes run a statement (rank tests, early exits,
one-process branches: :mod:`~paratrain.diagnostics.rank_guards`) and what runs only in the parent of a
launcher (:mod:`~paratrain.diagnostics.launcher_parent`). A module-level function that a script with an
entry point never uses does not run at all. Given what the functions it imports from its own project do
(:meth:`ScriptFacts.learn`), their rank tests count as the file's own.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from paratrain.diagnostics.assigned_values import bound_values
from paratrain.diagnostics.call_names import callee_names, is_true, keyword, last_name, returned_module
from paratrain.diagnostics.guard_texts import RANK_ZERO_TEST, returned_test_kind
from paratrain.diagnostics.imported_names import ImportedNames
from paratrain.diagnostics.launcher_parent import JOB_EXECUTORS, LauncherParent
from paratrain.diagnostics.library_calls import ignite_distributed
from paratrain.diagnostics.muting_launchers import muting_launcher
from paratrain.diagnostics.plain_runs import only_plain_runs
from paratrain.diagnostics.project_launches import Launch, multi_process_launch
from paratrain.diagnostics.rank_guards import RankGuards
from paratrain.diagnostics.tree_walk import children, walk

__all__ = ["DISTRIBUTED_MARKERS", "ScriptFacts", "callee_names", "is_true", "keyword", "last_name",
           "returned_module", "returned_test_kind"]

# Calls and wrappers that make a script multi-process. `launch` counts when it is not a function of
# the script itself (detectron2's `launch`, `fabric.launch()`): I-JEPA's own `def launch()` submits jobs.
DISTRIBUTED_MARKERS = {
    "init_process_group", "DistributedDataParallel", "DDP", "DistributedSampler", "spawn", "init",
    "initialize", "Accelerator", "DistributedOptimizer", "Fabric", "init_distributed", *JOB_EXECUTORS,
}
# Markers so generic that a project names its own functions so (`init(model_s, model_t, loader)`, a
# distillation warm-up): a call to the project's own `init` is judged by what the function does, not by its name.
_GENERIC_SETUP = ("init", "initialize")
# Set-up calls named like a launcher's that keep to one process: apex's `amp.initialize(model, optimizer)`
# prepares mixed precision.
_ONE_PROCESS_SETUP = ("apex.amp.",)
# Experiment trackers whose `init` starts a logged run, not processes (`wandb.init(project=…)`).
_TRACKERS = ("wandb", "comet_ml", "mlflow", "neptune", "clearml", "swanlab", "aim")
# A Lightning Trainer runs one process per device when given several (its ddp strategy re-runs the
# script in each), or when the command line chooses (`Trainer.from_argparse_args`).
_LIGHTNING_SPREAD = ("devices", "gpus", "strategy", "num_nodes")
# What starts processes from the script itself, so that a plain `python script.py` runs several.
_STARTS_ITS_OWN = r"\bspawn\b|start_processes|\bProcess\(|launch\(|\bFabric\b|submitit|horovod|\bhvd\.|\bray\b|lightning"
# torch.distributed calls that need a process group: a script making them runs under a launcher
# (FastChat's HF Trainer scripts call `dist.get_rank()` and `dist.barrier()` under torchrun).
_COLLECTIVE_CALLS = ("get_rank", "get_world_size", "barrier", "all_reduce", "all_gather", "broadcast",
                     "reduce", "gather", "scatter", "all_gather_object", "broadcast_object_list")


@dataclass
class ScriptFacts(RankGuards, LauncherParent):
    """Calls, assignments and the ``if`` guards around each node of one script."""

    tree: ast.Module
    lines: list[str]
    calls: list[ast.Call] = field(default_factory=list)
    # "sampler", "self.model" → values, however bound (`a, sampler = x, DistributedSampler(ds)`, walrus, with)
    assigned: dict[str, list[ast.expr]] = field(default_factory=dict)
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    loaded_names: dict[str, list[ast.Name]] = field(default_factory=dict)  # every read of `f`
    loaded_attrs: dict[str, list[ast.Attribute]] = field(default_factory=dict)  # every read of `x.f`
    modules: dict[str, str] = field(default_factory=dict)  # "th" → "torch", "save" → "torch.save"
    rank_helpers: set[str] = field(default_factory=set)  # functions of this file that return a rank test
    machine_helpers: set[str] = field(default_factory=set)  # ... that return `rank % gpus_per_node == 0`
    rank_getters: set[str] = field(default_factory=set)  # project functions the file imports that return the global rank
    own_functions: set[str] = field(default_factory=set)  # names of the functions defined in this file
    imported: ImportedNames = field(default_factory=ImportedNames)  # what its project's imported functions do
    script: Path | None = None  # the file, when read from one (its project's launch commands are read then)
    _uses_of: dict[ast.AST, list[ast.expr]] = field(default_factory=dict, repr=False)
    _binding_guards_asked: set[ast.AST] = field(default_factory=set, repr=False)

    @classmethod
    def read(cls, source: str) -> ScriptFacts:
        """Raises: SyntaxError (the caller turns it into a one-line error)."""
        try:
            tree = ast.parse(source)
        except SyntaxError as error:
            # Written for Python <= 3.6, where `async` was still a name (`x.cuda(async=True)`): read it
            # as that Python did; if that fails too, today's error is the one to report.
            try:
                tree = ast.parse(source, feature_version=(3, 6))
            except SyntaxError:
                raise error from None
        return cls.of_tree(tree, source)

    @classmethod
    def of_tree(cls, tree: ast.Module, source: str) -> ScriptFacts:
        """The facts of an already parsed module (``source``, its text, for the line-based questions)."""
        facts = cls(tree=tree, lines=source.splitlines())
        for parent in walk(tree):
            for child in children(parent):
                facts.parents[child] = parent
            for target, value in bound_values(parent):
                facts.assigned.setdefault(ast.unparse(target), []).append(value)
            if isinstance(parent, ast.Call):
                facts.calls.append(parent)
            elif isinstance(parent, ast.Name) and isinstance(parent.ctx, ast.Load):
                facts.loaded_names.setdefault(parent.id, []).append(parent)
            elif isinstance(parent, ast.Attribute) and isinstance(parent.ctx, ast.Load):
                facts.loaded_attrs.setdefault(parent.attr, []).append(parent)
            elif isinstance(parent, ast.Import):
                for alias in parent.names:
                    facts.modules[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
            elif isinstance(parent, ast.ImportFrom) and parent.module:
                for alias in parent.names:
                    facts.modules[alias.asname or alias.name] = f"{parent.module}.{alias.name}"
        facts.calls.sort(key=lambda call: (call.lineno, call.col_offset))
        functions = [node for node in walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        facts.own_functions = {function.name for function in functions}
        kinds = {function.name: returned_test_kind(function) for function in functions}
        facts.machine_helpers = {name for name, kind in kinds.items() if kind == "local"}
        facts.rank_helpers = {name for name, kind in kinds.items() if kind == "global"}
        return facts

    def learn(self, imported: ImportedNames, script: Path | None = None) -> None:
        """Take in what the functions the script imports from its project do (read from their files): their
        rank tests count as the file's own helpers'; with ``script``, the file's path, its project's launch
        commands are read when asked (:attr:`launch`). Called before any question is asked."""
        self.imported = imported
        self.script = script
        self.rank_helpers |= {name.rpartition(".")[2] for name in imported.rank_tests}
        self.machine_helpers |= {name.rpartition(".")[2] for name in imported.machine_tests}
        self.rank_getters = {name.rpartition(".")[2] for name in imported.global_rank_getters}
        for name, module in imported.star_modules.items():  # `logging` from `from utils import *`: the module
            if name not in self.modules and name not in self.assigned and name not in self.own_functions:
                self.modules[name] = module

    # ---- questions the rules ask ---------------------------------------------------------------
    def full_name(self, node: ast.AST) -> str:
        """``th.save`` after ``import torch as th`` → ``torch.save``; ``save`` after ``from torch import save``
        → ``torch.save``; names not imported stay as written."""
        text = ast.unparse(node.func if isinstance(node, ast.Call) else node)
        head, _, rest = text.partition(".")
        module = self.modules.get(head)
        return (module + ("." + rest if rest else "")) if module else text

    def calls_named(self, *names: str) -> list[ast.Call]:
        """The calls whose last name is one of ``names``, in the order of :attr:`calls`."""
        lists = [self._calls_by_name.get(name, []) for name in dict.fromkeys(names)]
        if len(lists) == 1:
            return list(lists[0])
        return sorted((call for calls in lists for call in calls), key=lambda call: self._call_order[id(call)])

    @cached_property
    def _calls_by_name(self) -> dict[str, list[ast.Call]]:
        by_name: dict[str, list[ast.Call]] = {}
        for call in self.calls:  # complete once read (:meth:`of_tree`)
            by_name.setdefault(last_name(call), []).append(call)
        return by_name

    @cached_property
    def _call_order(self) -> dict[int, int]:
        return {id(call): index for index, call in enumerate(self.calls)}

    def names_bound_to(self, *callee_names: str) -> dict[str, ast.Call]:
        """Variables (``x``, ``self.x``) assigned the result of one of these calls (the first such call),
        also through the module methods that return the module (``DataParallel(model).to(device)``)."""
        bound = {}
        for name, values in self.assigned.items():
            # `sampler = DistributedSampler(ds) if distributed else None` binds the call too
            choices = [returned_module(c) for v in values
                       for c in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
            calls = [v for v in choices if isinstance(v, ast.Call) and last_name(v) in callee_names]
            if calls:
                bound[name] = min(calls, key=lambda call: call.lineno)
        return bound

    def bindings(self, *callee_names: str) -> list[tuple[str, ast.Call]]:
        """Every assignment of one of these calls to a variable, in line order: a name bound twice
        (a tutorial's two recipes, each with its own ``train_sampler``) gives two entries."""
        found = [(name, call) for name, values in self.assigned.items() for value in values
                 for call in ((value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,))
                 if isinstance(call, ast.Call) and last_name(call) in callee_names]
        return sorted(found, key=lambda pair: pair[1].lineno)

    def bound_name(self, value: ast.expr) -> str | None:
        """The name (``x``, ``self.x``) that ``value`` is bound to, however the binding spells it
        (``x = value``, ``x, y = value, other``, ``(x := value)``, ``with value as x``); None when it is not bound."""
        node = self.parents.get(value)
        while isinstance(node, (ast.Tuple, ast.List)) and isinstance(node.ctx, ast.Load):
            node = self.parents.get(node)
        return next((ast.unparse(target) for target, bound in bound_values(node) if bound is value), None) if node else None

    @cached_property
    def distributed(self) -> bool:
        """The script starts or joins several processes (DDP, a sampler, spawn, Horovod, Fabric, a Lightning
        Trainer on several devices, a torch.distributed collective, …), reads the launcher's WORLD_SIZE / LOCAL_RANK (an HF Trainer
        script run by torchrun), calls a function of its project that makes the process group, branches on a rank,
        or is started by its own project with a multi-process launcher (:attr:`launch`, read only when the code
        alone does not tell)."""
        return any(self._starts_processes(call) and not self._one_process_fabric(call) for call in self.calls
                   ) or self.mentions(
            r"environ(?:\.get\(|\[)\s*[\"'](?:WORLD_SIZE|LOCAL_RANK)[\"']|getenv\(\s*[\"'](?:WORLD_SIZE|LOCAL_RANK)"
        ) or self.imported.joins_process_group or any(
            # `--local_rank`, the flag torch.distributed.launch and deepspeed hand each process they start
            call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value in ("--local_rank", "--local-rank")
            for call in self.calls_named("add_argument")
        ) or any(
            # a branch for rank 0 (`if training_args.local_rank in [-1, 0]:`): its author runs it on several
            isinstance(node, ast.If) and RANK_ZERO_TEST.search(ast.unparse(node.test)) and self._direct_test_kind(node.test)
            for node in walk(self.tree)
        ) or self.launch is not None or self._lightning_run_on_several()

    def _lightning_run_on_several(self) -> bool:
        from paratrain.diagnostics.lightning_runs import lightning_module_run_on_several  # it reads the project

        return lightning_module_run_on_several(self.tree, self.script)

    @cached_property
    def started_alone(self) -> Launch | None:
        """The command that runs the script in one process, when its project runs it only so: every command of
        the project that names it is a plain ``python script.py`` (ERNIE's README: ``python3 code/run_fewrel.py``),
        and the script starts no process of its own (no ``spawn``, ``Process``, ``launch()``, Fabric, submitit,
        Horovod or Lightning). Its distributed branch (``if args.local_rank != -1:``, ``if "WORLD_SIZE" in
        os.environ:``) is taken only once a launcher runs it on several, as ``paratrain run`` does. None for a
        source read alone, or when any of that does not hold. Reads the project's command files: ask it only
        of a script with a finding."""
        if self.script is None or self.mentions(_STARTS_ITS_OWN):
            return None
        return only_plain_runs(self.script)

    @cached_property
    def muted_launch(self) -> Launch | None:
        """The command of the script's project that starts its ranks through a launcher of the project sending
        every stdout but the first to /dev/null (:mod:`~paratrain.diagnostics.muting_launchers`), when no
        multi-process launcher command (:attr:`launch`) runs it too; None for a source read alone."""
        found = muting_launcher(self.script) if self.script is not None else None
        return found if found is not None and self.launch is None else None

    @cached_property
    def launch(self) -> Launch | None:
        """The command of the script's project (a README's ``deepspeed fine-tune.py``, a ``run.sh``'s
        ``torchrun --nproc_per_node 8 train.py``) that starts it in several processes, with its ``file:line``
        (:mod:`~paratrain.diagnostics.project_launches`); None for a source read alone."""
        return multi_process_launch(self.script) if self.script is not None else None

    def _starts_processes(self, call: ast.Call) -> bool:
        """A call that starts or joins several processes: DDP, a sampler, spawn, Horovod, Fabric, a launcher,
        a Lightning Trainer on several devices, a torch.distributed collective."""
        own = self.own_functions
        if last_name(call) in _GENERIC_SETUP and self._project_function(call):
            return False  # RepDistiller's `from helper.pretrain import init`: judged by what it does (joins_process_group)
        return bool(
            callee_names(call) & DISTRIBUTED_MARKERS and self.full_name(call).partition(".")[0] not in _TRACKERS
            and not self.full_name(call).startswith(_ONE_PROCESS_SETUP)
            or last_name(call).endswith("DistributedDataParallel")  # mmcv's MMDistributedDataParallel, apex's
            or (last_name(call) == "launch" and not (isinstance(call.func, ast.Name) and call.func.id in own)
                and not self._web_app_launch(call))
            or self.lightning_trainer_on_several_devices(call) or ignite_distributed(self, call)
            or self.full_name(call).startswith("torch.distributed.") and last_name(call) in _COLLECTIVE_CALLS)

    def _web_app_launch(self, call: ast.Call) -> bool:
        """``demo.launch()`` / ``app.queue().launch()`` of a Gradio app (``with gr.Blocks() as app:``): a web server,
        no training process."""
        root = call.func
        while isinstance(root, (ast.Attribute, ast.Call)):
            root = root.func if isinstance(root, ast.Call) else root.value
        return isinstance(root, ast.Name) and any(
            isinstance(value, ast.Call) and self.full_name(value).startswith("gradio.")
            for value in self.assigned.get(root.id, []))

    def _project_function(self, call: ast.Call) -> bool:
        """``call`` calls a function defined in this file or read in its project (not a library's)."""
        if isinstance(call.func, ast.Name) and call.func.id in self.own_functions:
            return True
        return self.imported.callee(call) in self.imported.read

    def _one_process_fabric(self, call: ast.Call) -> bool:
        """``Fabric(devices=1)`` (and ``fabric.launch()`` of one): a Fabric of one device on one node starts
        no other process."""
        if last_name(call) == "launch" and isinstance(call.func, ast.Attribute):
            made = self.names_bound_to("Fabric").get(ast.unparse(call.func.value))
            return made is not None and self._one_process_fabric(made)
        if last_name(call) != "Fabric":
            return False
        devices, nodes = keyword(call, "devices"), keyword(call, "num_nodes")
        return (isinstance(devices, ast.Constant) and devices.value == 1
                and (nodes is None or isinstance(nodes, ast.Constant) and nodes.value == 1))

    def lightning_on_several_devices(self) -> bool:
        """A Lightning Trainer of this file may start a process per device."""
        return any(self.lightning_trainer_on_several_devices(call) for call in self.calls)

    def lightning_trainer_on_several_devices(self, call: ast.Call) -> bool:
        """``pl.Trainer(devices=4, strategy="ddp")``, ``Trainer.from_argparse_args(args)``: a Lightning
        Trainer (imported from ``lightning``/``pytorch_lightning``) that may start a process per device.
        ``devices=1`` alone is one process; the HF Trainer (``transformers``) is not Lightning's."""
        name = self.full_name(call)
        if not re.match(r"(?:lightning|pytorch_lightning)\.(?:\w+\.)*Trainer(?:\.from_argparse_args|\.from_argv)?$", name):
            return False
        if not name.endswith("Trainer"):
            return True  # the command line picks the devices
        # `args.num_gpus = 1` just before `Trainer(gpus=args.num_gpus)` (mvsnerf): the value the option had is gone
        spread = [self._bound_just_before(call, kw.value) for kw in call.keywords if kw.arg in _LIGHTNING_SPREAD]
        # `config.trainer.strategy = "ddp"`, then `pl.Trainer(**config.trainer)` (a Hydra/OmegaConf config): the
        # settings the file stores on the mapping it unpacks count as keywords
        spread += [value for kw in call.keywords if kw.arg is None for name in _LIGHTNING_SPREAD
                   for value in self.assigned.get(f"{ast.unparse(kw.value)}.{name}", [])
                   + self.assigned.get(f"{ast.unparse(kw.value)}[{name!r}]", [])]
        return any(not (isinstance(value, ast.Constant) and value.value in (1, None, "auto", "single_device"))
                   for value in spread)

    def _bound_just_before(self, call: ast.Call, value: ast.expr) -> ast.expr:
        """The value an earlier statement of the block that holds ``call`` last bound to the name or attribute
        ``value`` (``args.num_gpus, args.use_amp = 1, False``); ``value`` itself when none did, or when it is
        neither. A binding inside a branch or loop of the block is not followed."""
        if not isinstance(value, (ast.Name, ast.Attribute)):
            return value
        statement: ast.AST | None = call
        while statement is not None and not isinstance(statement, ast.stmt):
            statement = self.parents.get(statement)
        owner = self.parents.get(statement) if statement is not None else None
        body = next((block for field in ("body", "orelse", "finalbody")
                     if statement in (block := getattr(owner, field, None) or [])), [])
        text, found = ast.unparse(value), value
        for earlier in body[:body.index(statement)] if body else []:
            found = next((bound for target, bound in bound_values(earlier) if ast.unparse(target) == text), found)
        return found

    def inside(self, node: ast.AST, *callee_names: str) -> ast.Call | None:
        """The nearest enclosing call to one of ``callee_names`` (``node`` is in its arguments)."""
        parent = self.parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.Call) and last_name(parent) in callee_names:
                return parent
            parent = self.parents.get(parent)
        return None

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (or module) whose body holds ``node``."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parent = self.parents.get(parent)
        return parent or self.tree

    def mentions(self, pattern: str) -> bool:
        return any(re.search(pattern, line) for line in self.lines)

    def main_block(self) -> ast.If | None:
        """The module's ``if __name__ == "__main__":``."""
        return next((stmt for stmt in self.tree.body
                     if isinstance(stmt, ast.If) and "__name__" in ast.unparse(stmt.test)), None)

    def runs_as_program(self) -> bool:
        """The file runs as a program: it has a main block, or its top level (outside functions and classes) logs,
        joins the process group or calls a function of its own. A module of ``def main(args)`` and imports only is
        run by some other entry point."""
        if self.main_block() is not None:
            return True
        work = {"info", "debug", "init_process_group", *self.own_functions}
        return any(isinstance(node, ast.Call) and last_name(node) in work
                   for stmt in self.tree.body if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                   for node in walk(stmt))

    def docstring_lines(self) -> set[int]:
        """Line numbers inside the module's, classes' and functions' docstrings."""
        lines = set()
        for node in walk(self.tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                    lines.update(range(first.lineno, first.end_lineno + 1))
        return lines
