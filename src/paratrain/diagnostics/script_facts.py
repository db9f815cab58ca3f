"""What the pitfall rules need to know about a script, read once from its syntax tree.

Static and approximate on purpose: names are matched by their last part
(``torch.utils.data.DataLoader`` and ``DataLoader`` are the same), values are followed
through plain assignments only, and a statement counts as "rank 0 only" when an
enclosing ``if`` tests a rank (``rank == 0``, ``is_main()``, ``dist.get_rank() == 0``…)
or when it sits in a function of this file whose every call site does (calls are
followed within the file, methods by their name: ``self._save_checkpoint()`` under
``if self.gpu_id == 0:`` guards the ``torch.save`` inside ``_save_checkpoint``).

Three more places run on one process only: the ``else:`` branch of a test for a distributed
run (``if args.distributed: … else: <one process>``), the statements after an early exit of the
other ranks (``if not is_main(): return``), and the parent of a launcher (``mp.spawn(main_worker)``,
detectron2's ``launch(main, …)``) under ``if __name__ == "__main__":``. A module-level function that
a script with such an entry point never uses does not run at all. Helpers of the file that return a
rank test (``def is_primary(args): return args.rank == 0``) count as rank tests.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property

from paratrain.diagnostics.imported_names import ImportedNames

# An `if` that limits a block to one process: the global rank or a main-process helper.
_GLOBAL_GUARD = re.compile(
    r"(?<![\w.])(?:\w+\.)*(?:rank|global_rank|get_rank|RANK|is_main\w*|is_master\w*|master_process|is_rank_zero"
    r"|is_primary\w*|is_root\w*|is_global_zero|is_world_process_zero|main_process|rank_?0|rank_zero\w*)\b")
# A comparison with rank 0 (not `local_rank > -1`, which only picks a device), or a library's
# main-process predicate (`trainer.is_world_process_zero()`, `accelerator.is_main_process`).
_RANK_ZERO_TEST = re.compile(
    r"(?:==|!=)\s*0\b|\bin\s*[\[(]\s*-1\s*,\s*0\s*[\])]"
    r"|(?<![\w])(?:\w+\.)*(?:is_world_process_zero|is_global_zero|is_main_process|is_local_main_process)\b")
_LOCAL_GUARD = re.compile(r"local_rank|LOCAL_RANK|local_process_index|is_local_\w*")
# An `if` that tells a multi-process run from a single-process one: its `else:` runs on one process.
# llama-recipes' `train_config.enable_fsdp` is its one switch to several processes (no DDP mode beside it).
_DISTRIBUTED_TEST = re.compile(
    r"^(?:\w+\.)*(?:ddp|distributed|is_distributed|use_ddp|multiprocessing_distributed|is_initialized\(\)"
    r"|is_dist_avail_and_initialized\(\)|enable_fsdp)$|world_size\s*>\s*1$")
# Calls that start the ranks from a parent process: `mp.spawn(main_worker, …)`, detectron2's
# `launch(main, …)`, `start_processes(fn, …)`, Fabric's `fabric.launch()`.
_LAUNCHERS = ("spawn", "launch", "start_processes")
# submitit's executors start `tasks_per_node` copies of what `executor.submit(fn)` is handed, on a cluster.
_JOB_EXECUTORS = ("AutoExecutor", "SlurmExecutor")
# Ends a block before anything after it runs.
_EXITS = ("exit", "quit", "_exit")
# The device index a process was started on (`gpu`, `gpu_id`, `device_id`): `mp.spawn` hands each
# process its rank on the one machine, so the tutorials (pytorch/examples' ddp-tutorial-series) test
# it as their rank 0; read as a global guard unless the file assigns it from LOCAL_RANK.
_DEVICE_GUARD = re.compile(r"(?<![\w])(?:\w+\.)*(?:gpu|gpu_id|device_id)\s*(?:==|!=)\s*0\b")
# A test that is true only in a single-process run: beside a rank test in an `or`, it still limits
# the block to one process (`if world_size == 1 or rank == 0:`).
_ONE_PROCESS_TEST = re.compile(
    r"^(?:\w+\.)*(?:world_size|get_world_size\(\))\s*(?:==|<=)\s*1$"
    # `local_rank == -1`: no launcher passed a local rank, so one process (`local_rank == -1 or get_rank() == 0`)
    r"|^(?:\w+\.)*local_rank\s*==\s*-1$")
# `local_rank >= 0`, `local_rank != -1`: a launcher passed a local rank, so every process of a distributed run.
_EVERY_RANK_OF_A_RUN = re.compile(r"(?:\w+\.)*local_rank\s*(?:>=\s*0|>\s*-1|!=\s*-1)")
# `rank % gpus_per_node == 0`: the first process of each machine, i.e. local rank 0.
_PER_MACHINE = re.compile(r"\brank\s*%\s*[\w.]+\s*==\s*0")
# Calls and wrappers that make a script multi-process. `launch` counts when it is not a function of
# the script itself (detectron2's `launch`, `fabric.launch()`): I-JEPA's own `def launch()` submits jobs.
DISTRIBUTED_MARKERS = {
    "init_process_group", "DistributedDataParallel", "DDP", "DistributedSampler", "spawn", "init",
    "initialize", "Accelerator", "DistributedOptimizer", "Fabric", "init_distributed", *_JOB_EXECUTORS,
}
# Set-up calls named like a launcher's that keep to one process: apex's `amp.initialize(model, optimizer)`
# prepares mixed precision.
_ONE_PROCESS_SETUP = ("apex.amp.",)
# Experiment trackers whose `init` starts a logged run, not processes (`wandb.init(project=…)`).
_TRACKERS = ("wandb", "comet_ml", "mlflow", "neptune", "clearml", "swanlab", "aim")
# A Lightning Trainer runs one process per device when given several (its ddp strategy re-runs the
# script in each), or when the command line chooses (`Trainer.from_argparse_args`).
_LIGHTNING_SPREAD = ("devices", "gpus", "strategy", "num_nodes")
# torch.distributed calls that need a process group: a script making them runs under a launcher
# (FastChat's HF Trainer scripts call `dist.get_rank()` and `dist.barrier()` under torchrun).
_COLLECTIVE_CALLS = ("get_rank", "get_world_size", "barrier", "all_reduce", "all_gather", "broadcast",
                     "reduce", "gather", "scatter", "all_gather_object", "broadcast_object_list")
# Lightning's decorator: the function runs on global rank 0 only.
_RANK_ZERO_DECORATOR = re.compile(r"(?:\w+\.)*rank_zero_only$")


def last_name(node: ast.AST) -> str:
    """``torch.nn.parallel.DistributedDataParallel`` → ``DistributedDataParallel``; ``f()()`` → ``""``."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def callee_names(call: ast.Call) -> set[str]:
    """What a call may call: ``last_name`` of its function, or of both branches of a conditional one
    (``(DDP if dist.is_initialized() else NullDDP)(model)``)."""
    if isinstance(call.func, ast.IfExp):
        return {last_name(call.func.body), last_name(call.func.orelse)} - {""}
    return {last_name(call)}


# nn.Module methods that return the module itself: `DataParallel(model).cuda()` is still the wrapper.
_SAME_MODULE = ("to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval", "requires_grad_")


def _returned_module(value: ast.expr) -> ast.expr:
    """``Wrapper(model).to(device).train()`` → ``Wrapper(model)``; any other value as it is."""
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr in _SAME_MODULE and isinstance(value.func.value, ast.Call)):
        value = value.func.value
    return value


def returned_test_kind(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``"global"`` for a short function returning a rank-0 test (``def is_primary(args): return args.rank == 0``),
    ``"local"`` for one returning a once-per-machine test, else ``""``."""
    if len(function.body) > 3:
        return ""
    texts = [ast.unparse(stmt.value) for stmt in function.body if isinstance(stmt, ast.Return) and stmt.value]
    # semseg's `main_process()` returns `... args.rank % args.ngpus_per_node == 0`: the first process
    # of each machine, a local-rank test whatever the function's name says.
    if any(_PER_MACHINE.search(text) for text in texts):
        return "local"
    return "global" if any(_GLOBAL_GUARD.search(_LOCAL_GUARD.sub("", text))
                           and re.search(r"==\s*0|\bnot\b|is_main|master|primary|zero", text) for text in texts) else ""


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


@dataclass
class ScriptFacts:
    """Calls, assignments and the ``if`` guards around each node of one script."""

    tree: ast.Module
    lines: list[str]
    calls: list[ast.Call] = field(default_factory=list)
    assigned: dict[str, list[ast.expr]] = field(default_factory=dict)  # "sampler", "self.model" → values
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    loaded_names: dict[str, list[ast.Name]] = field(default_factory=dict)  # every read of `f`
    loaded_attrs: dict[str, list[ast.Attribute]] = field(default_factory=dict)  # every read of `x.f`
    modules: dict[str, str] = field(default_factory=dict)  # "th" → "torch", "save" → "torch.save"
    rank_helpers: set[str] = field(default_factory=set)  # functions of this file that return a rank test
    machine_helpers: set[str] = field(default_factory=set)  # ... that return `rank % gpus_per_node == 0`
    own_functions: set[str] = field(default_factory=set)  # names of the functions defined in this file
    imported: ImportedNames = field(default_factory=ImportedNames)  # what its project's imported functions do
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
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                facts.parents[child] = parent
            if isinstance(parent, ast.Call):
                facts.calls.append(parent)
            elif isinstance(parent, ast.Assign):
                for target in parent.targets:
                    if isinstance(target, (ast.Name, ast.Attribute)):
                        facts.assigned.setdefault(ast.unparse(target), []).append(parent.value)
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
        functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        facts.own_functions = {function.name for function in functions}
        kinds = {function.name: returned_test_kind(function) for function in functions}
        facts.machine_helpers = {name for name, kind in kinds.items() if kind == "local"}
        facts.rank_helpers = {name for name, kind in kinds.items() if kind == "global"}
        return facts

    def learn(self, imported: ImportedNames) -> None:
        """Take in what the functions the script imports from its project do (read from their files): their
        rank tests count as the file's own helpers'. Called before any question is asked."""
        self.imported = imported
        self.rank_helpers |= {name.rpartition(".")[2] for name in imported.rank_tests}
        self.machine_helpers |= {name.rpartition(".")[2] for name in imported.machine_tests}

    # ---- questions the rules ask ---------------------------------------------------------------
    def full_name(self, node: ast.AST) -> str:
        """``th.save`` after ``import torch as th`` → ``torch.save``; ``save`` after ``from torch import save``
        → ``torch.save``; names not imported stay as written."""
        text = ast.unparse(node.func if isinstance(node, ast.Call) else node)
        head, _, rest = text.partition(".")
        module = self.modules.get(head)
        return (module + ("." + rest if rest else "")) if module else text

    def calls_named(self, *names: str) -> list[ast.Call]:
        return [call for call in self.calls if last_name(call) in names]

    def names_bound_to(self, *callee_names: str) -> dict[str, ast.Call]:
        """Variables (``x``, ``self.x``) assigned the result of one of these calls (the first such call),
        also through the module methods that return the module (``DataParallel(model).to(device)``)."""
        bound = {}
        for name, values in self.assigned.items():
            # `sampler = DistributedSampler(ds) if distributed else None` binds the call too
            choices = [_returned_module(c) for v in values
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

    @cached_property
    def distributed(self) -> bool:
        """The script starts or joins several processes (DDP, a sampler, spawn, Horovod, Fabric, a Lightning
        Trainer on several devices, a torch.distributed collective, …), reads the launcher's WORLD_SIZE / LOCAL_RANK (an HF Trainer
        script run by torchrun), calls a function of its project that makes the process group, or branches on a rank."""
        own = self.own_functions
        return any(
            callee_names(call) & DISTRIBUTED_MARKERS and self.full_name(call).partition(".")[0] not in _TRACKERS
            and not self.full_name(call).startswith(_ONE_PROCESS_SETUP)
            or last_name(call).endswith("DistributedDataParallel")  # mmcv's MMDistributedDataParallel, apex's
            or (last_name(call) == "launch" and not (isinstance(call.func, ast.Name) and call.func.id in own))
            or self._lightning_on_several_devices(call)
            or self.full_name(call).startswith("torch.distributed.") and last_name(call) in _COLLECTIVE_CALLS
            for call in self.calls
        ) or self.mentions(
            r"environ(?:\.get\(|\[)\s*[\"'](?:WORLD_SIZE|LOCAL_RANK)[\"']|getenv\(\s*[\"'](?:WORLD_SIZE|LOCAL_RANK)"
        ) or self.imported.joins_process_group or any(
            # a branch for rank 0 (`if training_args.local_rank in [-1, 0]:`): its author runs it on several
            isinstance(node, ast.If) and _RANK_ZERO_TEST.search(ast.unparse(node.test)) and self._direct_test_kind(node.test)
            for node in ast.walk(self.tree)
        )

    def _lightning_on_several_devices(self, call: ast.Call) -> bool:
        """``pl.Trainer(devices=4, strategy="ddp")``, ``Trainer.from_argparse_args(args)``: a Lightning
        Trainer (imported from ``lightning``/``pytorch_lightning``) that may start a process per device.
        ``devices=1`` alone is one process; the HF Trainer (``transformers``) is not Lightning's."""
        name = self.full_name(call)
        if not re.match(r"(?:lightning|pytorch_lightning)\.(?:\w+\.)*Trainer(?:\.from_argparse_args|\.from_argv)?$", name):
            return False
        if not name.endswith("Trainer"):
            return True  # the command line picks the devices
        spread = [kw for kw in call.keywords if kw.arg in _LIGHTNING_SPREAD]
        return any(not (isinstance(kw.value, ast.Constant) and kw.value.value in (1, None, "auto", "single_device"))
                   for kw in spread)

    def guard(self, node: ast.AST) -> str:
        """``"global"`` under a rank-0 test, ``"local"`` under a local-rank test only, else ``""``.

        A function of this file counts as guarded when every use of its name is a call under
        such a test (and it is used at all): one passed as a callback, or never called here,
        may run anywhere.
        """
        return self._guard(node, self._callers_guards)

    @cached_property
    def _callers_guards(self) -> dict[ast.AST, str]:
        """The guard over every caller of each function of the file, read for all functions at once.

        Following calls one path at a time costs time exponential in the number of methods that call
        each other (a trainer class of a few dozen). Here every function starts unguarded and takes the
        guard of its callers until nothing changes; a guard only grows ("" → "local" → "global"), so
        each changes at most twice and the rounds end. A function reached only through a cycle of
        calls stays unguarded.
        """
        functions = [node for node in ast.walk(self.tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        table = dict.fromkeys(functions, "")
        changed = True
        while changed:
            changed = False
            for function in functions:
                kind = self._callers_guard(function, table)
                if kind != table[function]:
                    table[function], changed = kind, True
        return table

    def guard_in_function(self, node: ast.AST) -> str:
        """:meth:`guard` within ``node``'s own function only, its callers left aside (a helper of another
        file, called from the script, is asked how it guards itself)."""
        return self._guard(node, {})

    def _guard(self, node: ast.AST, callers_guards: dict[ast.AST, str]) -> str:
        local = False
        child, parent = node, self.parents.get(node)
        while parent is not None:
            if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
                in_else = child in parent.orelse if isinstance(parent, ast.If) else child is parent.orelse
                if self._single_process_branch(parent.test, in_else):
                    return "global"
                kind = self._test_kind(parent.test)  # either branch: `if rank != 0: … else: save()`
                if kind == "global":
                    return "global"
                local = local or kind == "local"
            exits = self._early_exit_kind(parent, child)
            if exits == "global":
                return "global"
            local = local or exits == "local"
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    _RANK_ZERO_DECORATOR.match(ast.unparse(d)) for d in parent.decorator_list):
                return "global"
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                callers = callers_guards.get(parent, "")
                if callers == "global":
                    return "global"
                local = local or callers == "local"
            child, parent = parent, self.parents.get(parent)
        return "local" if local else ""

    def _single_process_branch(self, test: ast.expr, in_else: bool) -> bool:
        """The branch runs when the job is not distributed: ``else:`` of ``if ddp:``, body of ``if not ddp:``."""
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        text = ast.unparse(test.operand if negated else test)
        return bool(_DISTRIBUTED_TEST.search(text)) and in_else != negated

    def single_process(self, node: ast.AST) -> bool:
        """``node`` sits in the branch a run without ``torch.distributed`` takes (``else:`` of ``if ddp:``)."""
        child, parent = node, self.parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.If) and child is not parent.test and self._single_process_branch(
                    parent.test, child in parent.orelse):
                return True
            child, parent = parent, self.parents.get(parent)
        return False

    def _early_exit_kind(self, block_owner: ast.AST, child: ast.AST) -> str:
        """``if not is_main(): return`` (or ``if rank != 0: return``) before ``child`` in the same body:
        what follows runs on rank 0 only."""
        body = getattr(block_owner, "body", None)
        if not isinstance(body, list) or child not in body:
            return ""
        kind = ""
        for stmt in body[:body.index(child)]:
            if not (isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Continue))
                    and not stmt.orelse):
                continue
            test = stmt.test
            text = ast.unparse(test)
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                found = self._test_kind(test.operand)
            elif re.search(r"!=\s*0\b|>\s*0\b", text):
                found = self._test_kind(test)
            else:
                continue
            if found == "global":
                return "global"
            kind = kind or found
        return kind

    def _test_kind(self, test: ast.expr, _depth: int = 0) -> str:
        if isinstance(test, ast.BoolOp):
            return self._bool_test_kind(test, _depth)
        kind = self._direct_test_kind(test)
        if kind or _depth >= 2:
            return kind
        return self._stored_test_kind(test, _depth)

    def _bool_test_kind(self, test: ast.BoolOp, depth: int) -> str:
        """``a and b`` holds where both do: one rank test among them limits the block. ``a or b`` holds
        where either does: a rank test only when every part is one (``is_global_zero or "stage_3" in
        strategy`` runs on every rank with ZeRO-3), a test for a single-process run counting as one
        (``not args.distributed or rank == 0``)."""
        if isinstance(test.op, ast.And):
            kinds = {self._test_kind(value, depth) for value in test.values}
            return "global" if "global" in kinds else "local" if "local" in kinds else ""
        kinds = {
            "global" if self._single_process_branch(value, in_else=False)
            or _ONE_PROCESS_TEST.search(ast.unparse(value)) else self._test_kind(value, depth)
            for value in test.values
        }
        return "global" if kinds == {"global"} else "local" if kinds <= {"global", "local"} else ""

    def _stored_test_kind(self, test: ast.expr, depth: int) -> str:
        """A rank test kept in a variable (``save_logs = args.save_logs and is_master(args)``, then
        ``if save_logs:``): the kind of what every assignment stores, a constant ``False``/``None``
        (which only disables) left aside."""
        names = [node for node in ast.walk(test) if isinstance(node, (ast.Name, ast.Attribute))]
        for node in names:
            bound = self.assigned.get(ast.unparse(node), [])
            values = [v for v in bound if not (isinstance(v, ast.Constant) and v.value in (False, None))]
            # `writer = None`, then `if rank == 0: writer = SummaryWriter()`: a name that is None except
            # where a rank test bound it is truthy on those ranks only (`if not writer: continue`).
            unset = depth == 0 and isinstance(test, (ast.Name, ast.Attribute)) and len(values) < len(bound)
            kinds = {self._test_kind(v, depth + 1) or (self._binding_guard(v) if unset else "") for v in values}
            if values and kinds == {"global"}:
                return "global"
            if values and kinds <= {"global", "local"} and "local" in kinds:
                return "local"
        return ""

    def _binding_guard(self, value: ast.expr) -> str:
        """The rank test over the assignment of ``value`` in its own function (callers not followed); ""
        while that very question is being answered (``x = None; if x: x = f()`` asks it again)."""
        if value in self._binding_guards_asked:
            return ""
        self._binding_guards_asked.add(value)
        try:
            return self._guard(value, {})
        finally:
            self._binding_guards_asked.discard(value)

    def _direct_test_kind(self, test: ast.expr) -> str:
        text = ast.unparse(test)
        called = {last_name(node) for node in ast.walk(test) if isinstance(node, ast.Call)}
        if called & self.machine_helpers:
            return "local"
        if called & self.rank_helpers:
            return "global"
        if _PER_MACHINE.search(text):
            return "local"
        device = _DEVICE_GUARD.search(text)
        if device:
            name = device.group(0).split("=")[0].rstrip("!= ").strip()
            values = self.assigned.get(name, [])
            from_env = any(_LOCAL_GUARD.search(ast.unparse(v)) for v in values)
            per_node = {name, *(ast.unparse(v) for v in values)} & self._node_offset_indices
            return "local" if from_env or per_node else "global"
        if {ast.unparse(n) for n in ast.walk(test) if isinstance(n, (ast.Name, ast.Attribute))} & self._group_ranks:
            return "global"  # the value this process gave init_process_group as its rank, whatever its name
        if _GLOBAL_GUARD.search(_LOCAL_GUARD.sub("", text)):
            return "global"
        if _EVERY_RANK_OF_A_RUN.fullmatch(text):
            return ""  # `local_rank >= 0`: true on every rank of a distributed run, a device choice
        return "local" if _LOCAL_GUARD.search(text) else ""

    @cached_property
    def _node_offset_indices(self) -> set[str]:
        """Names added to a node's offset to make the rank (``rank = node_rank * ngpus_per_node + gpu``):
        the index of the process on its machine, so ``gpu == 0`` is once per machine."""
        return {
            ast.unparse(side) for values in self.assigned.values() for value in values
            if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)
            and any(isinstance(other, ast.BinOp) and isinstance(other.op, ast.Mult) for other in (value.left, value.right))
            for side in (value.left, value.right) if isinstance(side, (ast.Name, ast.Attribute))
        }

    @cached_property
    def _group_ranks(self) -> set[str]:
        """Names holding the rank handed to ``init_process_group(rank=...)`` (``rank=local_rank`` with
        ``args.local_rank = local_rank``): the process's global rank, even when named ``local_rank``
        (one machine, a process per GPU)."""
        ranks = {ast.unparse(kw.value) for call in self.calls_named("init_process_group") for kw in call.keywords
                 if kw.arg == "rank" and isinstance(kw.value, (ast.Name, ast.Attribute))}
        return ranks | {name for name, values in self.assigned.items()
                        if values and all(ast.unparse(v) in ranks for v in values)}

    def _callers_guard(self, function: ast.FunctionDef | ast.AsyncFunctionDef, callers_guards: dict[ast.AST, str]) -> str:
        """The weakest guard over every use of ``function``'s name in this file (methods: ``x.name``),
        with ``callers_guards`` standing for the guards of the functions those uses sit in."""
        uses = self._uses(function)
        if not uses:
            # A script (it has a __main__ entry point) that never uses one of its own functions never
            # runs it; a module's functions are called from other files.
            top_level = self.parents.get(function) is self.tree
            return "global" if top_level and self.main_block() is not None and not function.decorator_list else ""
        kinds = set()
        for use in uses:
            call = self.parents.get(use)
            if not (isinstance(call, ast.Call) and call.func is use):
                return ""  # handed on (a callback, mp.spawn's target): runs where the receiver decides
            kinds.add(self._guard(call, callers_guards))
        if kinds == {"global"}:
            return "global"
        return "local" if "" not in kinds else ""

    def _uses(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
        """Every read of ``function``'s name in this file: ``f`` for a function, ``x.f`` for a method where
        ``x`` may be an instance of its class (kept per function: guards ask for it again and again)."""
        if function not in self._uses_of:
            owner = self.parents.get(function)
            self._uses_of[function] = (
                [use for use in self.loaded_attrs.get(function.name, []) if self._may_be_instance(use.value, owner)]
                if isinstance(owner, ast.ClassDef) else self.loaded_names.get(function.name, []))
        return self._uses_of[function]

    def _may_be_instance(self, receiver: ast.expr, cls: ast.ClassDef) -> bool:
        """``receiver.method`` may call ``cls``'s method: ``self``/``cls`` inside that class (or one naming it as
        a base), a name assigned ``Cls(...)``, or a receiver of unknown origin (a parameter). Not an imported
        module (``torch.save``) nor a name bound to another call (``self.accelerator = Accelerator()``)."""
        text = ast.unparse(receiver)
        if text in ("self", "cls"):
            enclosing = self.parents.get(receiver)
            while enclosing is not None and not isinstance(enclosing, ast.ClassDef):
                enclosing = self.parents.get(enclosing)
            return enclosing is not None and (enclosing is cls or cls.name in {last_name(b) for b in enclosing.bases})
        if text.partition(".")[0] in self.modules:
            return False
        values = self.assigned.get(text, [])
        if not values:
            return True
        return any(not isinstance(v, ast.Call) or last_name(v) == cls.name for v in values)

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

    def in_launcher(self, node: ast.AST) -> bool:
        """``node`` runs only in the parent that starts the ranks: beside a call that hands a function of
        this file to ``mp.spawn``/``pt.spawn``/detectron2's ``launch``, under ``if __name__ == "__main__"``
        or in a function called only from there (the children import the file under another name, so
        that block does not run in them); in a file with no such block, in the function that makes the
        call (an entry point of its own, like a console script's)."""
        if self._exits_before_launch(node):
            return True
        own = self.own_functions
        main = self.main_block()
        executors = {name for name in self.names_bound_to(*_JOB_EXECUTORS)}
        submits = [call for call in self.calls_named("submit", "map_array")
                   if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) in executors]
        for call in self.calls_named(*_LAUNCHERS) + submits:
            if call not in submits and not any(isinstance(arg, ast.Name) and arg.id in own
                                               for arg in call.args[:1] + [kw.value for kw in call.keywords]):
                continue
            scope = self.scope(call)
            if scope is self.tree:
                if main is not None and self._within(call, main) and self._within(node, main):
                    return True
            elif self.scope(node) is scope and (
                    self._called_only_from(scope, main) if main is not None else not self._started(scope)):
                # A function that starts the ranks runs in the parent; with no `__main__` block it is an
                # entry point of its own (`fire.Fire(train_from_folder)`, a console script).
                return True
        return False

    def _started(self, function: ast.AST) -> bool:
        """``function`` is handed to a launcher (``mp.spawn(function, …)``): it runs in the children."""
        return any(isinstance(arg, ast.Name) and arg.id == getattr(function, "name", None)
                   for call in self.calls_named(*_LAUNCHERS) for arg in call.args[:1] + [kw.value for kw in call.keywords])

    def _exits_before_launch(self, node: ast.AST) -> bool:
        """``node`` sits in a block that ends the program (``quit()``, ``sys.exit()``) before a launcher call
        later in the same function (``fabric.launch()``, ``mp.spawn``): only the one process that was
        started runs it (litgpt's ``--model_name list`` prints the models and quits)."""
        scope = self.scope(node)
        launches = [call for call in self.calls_named(*_LAUNCHERS) if self.scope(call) is scope]
        if not launches:
            return False
        child, parent = node, self.parents.get(node)
        while parent is not None and parent is not scope:
            for body in (getattr(parent, name, None) for name in ("body", "orelse", "handlers", "finalbody")):
                if isinstance(body, list) and child in body and body[-1] is not child and self._is_exit(body[-1]):
                    return any(call.lineno > body[-1].lineno for call in launches)
            child, parent = parent, self.parents.get(parent)
        return False

    @staticmethod
    def _is_exit(stmt: ast.stmt) -> bool:
        return isinstance(stmt, ast.Raise) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and last_name(stmt.value) in _EXITS)

    def _called_only_from(self, function: ast.AST, region: ast.AST, depth: int = 0) -> bool:
        """Every use of ``function`` (a module-level function) is in ``region``, or in functions of the
        module that are themselves used only from there (a click/argparse ``main()`` that calls
        ``launch_training()``), followed a few levels up and never through a launcher's target."""
        uses = self.loaded_names.get(getattr(function, "name", ""), [])
        if not uses or self.parents.get(function) is not self.tree:
            return False
        for use in uses:
            if self._within(use, region):
                continue
            caller = self.scope(use)
            if depth >= 3 or caller is self.tree or self._started(caller) or not self._called_only_from(
                    caller, region, depth + 1):
                return False
        return True

    def _within(self, node: ast.AST, ancestor: ast.AST) -> bool:
        parent = self.parents.get(node)
        while parent is not None and parent is not ancestor:
            parent = self.parents.get(parent)
        return parent is ancestor

    def docstring_lines(self) -> set[int]:
        """Line numbers inside the module's, classes' and functions' docstrings."""
        lines = set()
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                    lines.update(range(first.lineno, first.end_lineno + 1))
        return lines
