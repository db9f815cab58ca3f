"""Which processes run a statement of a script: the rank tests, early exits and one-process branches around it.

A statement counts as "rank 0 only" (``"global"``) when an enclosing ``if`` tests a rank (``rank == 0``,
``is_main()``, ``dist.get_rank() == 0``…), when the other ranks left its block before it (``if not is_main():
return``), when it sits in the ``else:`` of a test for a distributed run (``if args.distributed: … else:``), or
when it sits in a function of the file whose every call site is so guarded (calls followed within the file,
methods by their name: ``self._save_checkpoint()`` under ``if self.gpu_id == 0:`` guards the ``torch.save``
inside it). ``"local"`` is once per machine (``local_rank == 0``, ``rank % gpus_per_node == 0``). Helpers of the
file, or of its project, that return a rank test (``def is_primary(args): return args.rank == 0``) count as
rank tests. :class:`RankGuards` is a part of :class:`~paratrain.diagnostics.script_facts.ScriptFacts`.
"""

from __future__ import annotations

import ast
import re
from functools import cached_property

from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.flag_guards import passed_by_every_call, switched_off_elsewhere
from paratrain.diagnostics.guard_texts import (
    DEVICE_GUARD, DISTRIBUTED_TEST, EVERY_RANK_OF_A_RUN, GLOBAL_GUARD, LOCAL_GUARD, ONE_PROCESS_TEST, PER_MACHINE,
    RANK_ZERO_DECORATOR, environ_presence, not_main_membership, turns_distribution_off, without_device_queries)
from paratrain.diagnostics.project_callers import callers_guard, method_callers_guard
from paratrain.diagnostics.project_mentions import project_names
from paratrain.diagnostics.rank_attributes import given_on_rank_0
from paratrain.diagnostics.rank_values import global_rank_value, returning_the_global_rank
from paratrain.diagnostics.tree_walk import walk


class RankGuards:
    """The guard questions of :class:`~paratrain.diagnostics.script_facts.ScriptFacts` (its parents, calls,
    assignments and helpers)."""

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
        functions = [node for node in walk(self.tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
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
            if parent is self.tree and child is self._self_test:
                return "global"  # a module's self-test: one process
            if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
                in_else = child in parent.orelse if isinstance(parent, ast.If) else child is parent.orelse
                if self._single_process_branch(parent.test, in_else) or turns_distribution_off(parent, child):
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
                    RANK_ZERO_DECORATOR.match(ast.unparse(d)) for d in parent.decorator_list):
                return "global"
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and self._lightning_per_machine(parent):
                local = True
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                callers = callers_guards.get(parent, "")
                if callers == "global":
                    return "global"
                local = local or callers == "local"
            child, parent = parent, self.parents.get(parent)
        return "local" if local else ""

    def _lightning_per_machine(self, function: ast.AST) -> bool:
        """``prepare_data`` of a LightningDataModule or LightningModule: Lightning runs it on the first process
        of each machine (``prepare_data_per_node``), the other hooks on every process."""
        owner = self.parents.get(function)
        return (function.name == "prepare_data" and isinstance(owner, ast.ClassDef)
                and any(re.search(r"Lightning(?:Data)?Module$", ast.unparse(base)) for base in owner.bases))

    def _single_process_branch(self, test: ast.expr, in_else: bool) -> bool:
        """The branch runs when the job is not distributed: ``else:`` of ``if ddp:``, body of ``if not ddp:``,
        body of ``if not args.ddp and not args.dp:`` (OpenLTM: one part of an ``and`` is enough)."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and not in_else:
            return any(self._single_process_branch(value, in_else=False) for value in test.values)
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        if in_else and not negated and EVERY_RANK_OF_A_RUN.fullmatch(ast.unparse(test)):
            return True  # `if local_rank > -1: … else:`: no launcher passed a local rank (Person re-ID's save_network)
        if not in_else and not negated and ONE_PROCESS_TEST.fullmatch(ast.unparse(test)):
            return True  # StudioGAN's `if cfgs.OPTIMIZATION.world_size == 1:`: a job of one process
        # ProPainter's `config['distributed']`: the flag kept under a key reads as the flag
        text = re.sub(r"^(?:\w+\.)*\w+\[['\"](\w+)['\"]\]$", r"\1", ast.unparse(test.operand if negated else test))
        return bool(DISTRIBUTED_TEST.search(text)) and in_else != negated

    def single_process(self, node: ast.AST) -> bool:
        """``node`` sits in the branch a run without ``torch.distributed`` takes (``else:`` of ``if ddp:``, or a
        branch that sets ``args.distributed = False``), or in a module's self-test (:attr:`_self_test`)."""
        child, parent = node, self.parents.get(node)
        while parent is not None:
            if parent is self.tree and child is self._self_test:
                return True
            if isinstance(parent, ast.If) and child is not parent.test and (self._single_process_branch(
                    parent.test, child in parent.orelse) or turns_distribution_off(parent, child)):
                return True
            child, parent = parent, self.parents.get(parent)
        return False

    @cached_property
    def _self_test(self) -> ast.If | None:
        """The ``if __name__ == "__main__":`` block of a module whose several processes come from its functions and
        classes only, when the block uses none of them and starts no process itself (ResShift's ``trainer.py``, whose
        classes ``main.py`` builds from a config, ends with an image test run as ``python trainer.py``): it runs in
        one process. None otherwise.

        Invariant: only when some function or class of the file starts or joins processes, none is decorated (a
        registry may run it from the block), nothing at the module's top level starts or joins processes, the block
        names none of the file's own functions or classes (a ``main()`` it calls would), and no command of the
        project launches this file in several processes."""
        main = self.main_block()
        if main is None:
            return None
        definitions = [stmt for stmt in self.tree.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        top = [stmt for stmt in self.tree.body if stmt is not main and stmt not in definitions]
        if not any(isinstance(n, ast.Call) and self._starts_processes(n) for d in definitions for n in walk(d)):
            return None  # its processes come from elsewhere: the main block is the program (Swin-Unet's train.py)
        if any(d.decorator_list for d in definitions if not isinstance(d, ast.ClassDef)):
            return None  # a registry (typer's `@app.command()`, hydra's `@main`) may run them from the block
        own = {d.name for d in definitions}
        if any(isinstance(n, ast.Name) and n.id in own for n in walk(main)):
            return None
        if any(isinstance(n, ast.Call) and self._starts_processes(n) for part in [main, *top] for n in walk(part)):
            return None
        return main if self.launch is None else None

    def _early_exit_kind(self, block_owner: ast.AST, child: ast.AST) -> str:
        """``if not is_main(): return`` (or ``if rank != 0: return``, or an ``assert`` of one process) before
        ``child`` in the same body: what follows runs on rank 0 only."""
        body = next((b for b in (getattr(block_owner, f, None) for f in ("body", "orelse")) if isinstance(b, list)
                     and child in b), None)  # an `else:` is a body of its own
        if body is None:
            return ""
        kind = ""
        for stmt in body[:body.index(child)]:
            if isinstance(stmt, ast.Assert) and (  # `assert opt.local_rank == -1, "no DDP for --evolve"`: holds after
                    ONE_PROCESS_TEST.search(ast.unparse(stmt.test)) or self._single_process_branch(stmt.test, False)):
                return "global"
            if not (isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Continue))
                    and not stmt.orelse):
                continue
            test = stmt.test
            text = ast.unparse(test)
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                found = self._test_kind(test.operand)
            elif re.search(r"!=\s*0\b|>\s*0\b", text) or not_main_membership(test):
                found = self._test_kind(test)
            else:
                continue
            if found == "global":
                return "global"
            kind = kind or found
        return kind

    def test_kind(self, test: ast.expr) -> str:
        """``"global"`` for a rank-0 test (written, combined, kept in a name, through a helper), ``"local"`` for a
        local-rank test, else ``""``."""
        return self._test_kind(test)

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
            or ONE_PROCESS_TEST.search(ast.unparse(value)) else self._test_kind(value, depth)
            for value in test.values
        }
        return "global" if kinds == {"global"} else "local" if kinds <= {"global", "local"} else ""

    def _stored_test_kind(self, test: ast.expr, depth: int) -> str:
        """A rank test kept in a variable (``save_logs = args.save_logs and is_master(args)``, then
        ``if save_logs:``): the kind of what every assignment stores, a constant ``False``/``None``
        (which only disables) left aside; or an object's attribute that only rank 0's construction gives a value
        (:mod:`~paratrain.diagnostics.rank_attributes`)."""
        given = given_on_rank_0(test, self.parents, self.tree, self.script) if depth == 0 else ""
        if given:
            return given
        names = [node for node in walk(test) if isinstance(node, (ast.Name, ast.Attribute))]
        if depth == 0 and isinstance(test, (ast.Name, ast.Attribute)):
            switched = switched_off_elsewhere(self, self.assigned.get(ast.unparse(test), []))
            if switched:
                return switched
        if depth == 0 and isinstance(test, ast.Name):
            passed = passed_by_every_call(self, test)
            if passed:
                return passed
        for node in names:
            bound = self.assigned.get(ast.unparse(node), [])
            values = [v for v in bound if not (isinstance(v, ast.Constant) and v.value in (False, None))]
            # PVD's `should_diag = gpu == 0` when distributed, `should_diag = True` otherwise: a flag that is a
            # rank-0 test wherever it is not simply on is on in a one-process run only.
            tests = [v for v in values if not (isinstance(v, ast.Constant) and v.value is True)]
            # `writer = None`, then `if rank == 0: writer = SummaryWriter()`: a name that is None except
            # where a rank test bound it is truthy on those ranks only (`if not writer: continue`).
            unset = depth == 0 and isinstance(test, (ast.Name, ast.Attribute)) and len(values) < len(bound)
            kinds = {(self._test_kind(v, depth + 1) if self._may_be_a_test(v) else "")
                     or (self._binding_guard(v) if unset else "") for v in tests}
            if tests and kinds == {"global"}:
                return "global"
            if tests and kinds <= {"global", "local"} and "local" in kinds:
                return "local"
        return ""

    @cached_property
    def _maybe_tests(self) -> dict[ast.expr, bool]:
        return {}

    def _may_be_a_test(self, value: ast.expr) -> bool:
        """:meth:`_read_may_be_a_test`, kept per node (asked at every reading of a stored test)."""
        known = self._maybe_tests.get(value)
        if known is None:
            known = self._maybe_tests[value] = self._read_may_be_a_test(value)
        return known

    def _read_may_be_a_test(self, value: ast.expr) -> bool:
        """A stored value that may hold a rank test: anything but a call of something other than a rank helper.
        XMem's ``model = XMemTrainer(config, local_rank=local_rank)`` passes a rank and tests none: a test of
        what it made (``if network_in_memory is not None:``, bound to ``model.XMem.module.state_dict()``) runs
        on every rank."""
        if not isinstance(value, ast.Call):
            return True
        called = last_name(value)
        return (called in self.rank_helpers or called in self.machine_helpers
                or bool(GLOBAL_GUARD.search(ast.unparse(value.func)) or LOCAL_GUARD.search(ast.unparse(value.func))))

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

    @cached_property
    def _direct_kinds(self) -> dict[ast.expr, str]:
        return {}

    def _direct_test_kind(self, test: ast.expr) -> str:
        """The kind of ``test`` read from its own text and the file's rank names (kept per node: stored tests are
        asked again and again, and each reading unparses the node)."""
        kind = self._direct_kinds.get(test)
        if kind is None:
            kind = self._direct_kinds[test] = self._read_direct_test_kind(test)
        return kind

    def _read_direct_test_kind(self, test: ast.expr) -> str:
        if environ_presence(test):
            return ""
        text = without_device_queries(ast.unparse(test))
        called = {last_name(node) for node in walk(test) if isinstance(node, ast.Call)}
        if called & self.machine_helpers:
            return "local"
        if called & (self.rank_helpers | self.rank_getters):
            return "global"  # a rank-0 helper, or a rank from a helper that returns the global one
        if PER_MACHINE.search(text):
            return "local"
        device = DEVICE_GUARD.search(text)
        if device:
            name = device.group(0).split("=")[0].rstrip("!= ").strip()
            values = self.assigned.get(name, [])
            from_env = any(LOCAL_GUARD.search(ast.unparse(v)) for v in values)
            per_node = {name, *(ast.unparse(v) for v in values)} & self._node_offset_indices
            return "local" if from_env or per_node else "global"
        names = {name for n in walk(test) if isinstance(n, (ast.Name, ast.Attribute))
                 and re.search(rf"(?<![\w.]){re.escape(name := ast.unparse(n))}(?![\w])", text)}
        if names & self._group_ranks:
            return "global"  # the value this process gave init_process_group as its rank, whatever its name
        if names & self._local_ranks_by_another_name:
            return "local"
        if GLOBAL_GUARD.search(LOCAL_GUARD.sub("", text)):
            return "global"
        if EVERY_RANK_OF_A_RUN.fullmatch(text):
            return ""  # `local_rank >= 0`: true on every rank of a distributed run, a device choice
        return "local" if LOCAL_GUARD.search(text) else ""

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
        # Cutie's `local_rank = torch.distributed.get_rank(); self.local_rank = local_rank`: a name holds what it
        # is given, so one given only the global rank (or names holding it) tests the global rank. Followed to
        # a fixed point, a few names deep.
        returning = self.functions_returning_the_global_rank | self.rank_getters
        for _ in range(3):
            held = {name for name, values in self.assigned.items()
                    if values and all(ast.unparse(v) in ranks or global_rank_value(v)
                                      or isinstance(v, ast.Call) and last_name(v) in returning for v in values)}
            if held <= ranks:
                break
            ranks |= held
        return ranks

    @cached_property
    def _local_ranks_by_another_name(self) -> set[str]:
        """Names every assignment of which reads the launcher's ``LOCAL_RANK`` (wespeaker's ``rank =
        int(os.environ['LOCAL_RANK'])``): ``rank == 0`` on them is once per machine, whatever the name says.
        A name handed to ``init_process_group(rank=...)`` stays global (:attr:`_group_ranks`)."""
        return {name for name, values in self.assigned.items()
                if values and name not in self._group_ranks
                and all(re.search(r"""environ(?:\.get)?[\[(]\s*['"]LOCAL_RANK['"]|getenv\(\s*['"]LOCAL_RANK['"]""",
                                  ast.unparse(v)) for v in values)}

    @cached_property
    def functions_returning_the_global_rank(self) -> set[str]:
        """:func:`~paratrain.diagnostics.rank_values.returning_the_global_rank` of this file."""
        return returning_the_global_rank(self.tree)

    def _callers_guard(self, function: ast.FunctionDef | ast.AsyncFunctionDef, callers_guards: dict[ast.AST, str]) -> str:
        """The weakest guard over every use of ``function``'s name in this file (methods: ``x.name``),
        with ``callers_guards`` standing for the guards of the functions those uses sit in."""
        uses = self.uses(function)
        if not uses:
            # A script (it has a __main__ entry point) that never uses one of its own functions never
            # runs it; a module's functions are called from other files.
            top_level = self.parents.get(function) is self.tree
            owner = self.parents.get(function)
            if not top_level and isinstance(owner, ast.ClassDef) and self.parents.get(owner) is self.tree \
                    and self.script is not None and not function.decorator_list:
                # StudioGAN's WORKER.save, called as `worker.save(...)` by loader.py under a rank-0 test
                return method_callers_guard(self.script, owner.name, function.name)
            if not top_level or function.decorator_list:
                return ""
            # A module's function that no other file of its project names either never runs (LSGM's
            # `utils.save_checkpoint`, which the trainers replaced with saves of their own). A main block of its
            # own is a self-test when other files import the function (CLIP-Driven-Universal-Model's
            # `dataset/dataloader.py`, whose `get_loader` train.py calls): their calls decide.
            named_elsewhere = self.script is not None and project_names(self.script, function.name) is True
            if not named_elsewhere and (self.main_block() is not None or self._unnamed_elsewhere(function)):
                return "global"
            # FocalNet's `utils.save_checkpoint`, called by main.py under `if dist.get_rank() == 0`
            return callers_guard(self.script, function.name) if self.script is not None else ""
        kinds = set()
        for use in uses:
            if self.scope(use) is function and (isinstance(use, ast.Name) or ast.unparse(use.value) in ("self", "cls")):
                continue  # it calls itself: that runs only where it already runs (CLAP's update_top_k_performance)
            call = self.parents.get(use)
            if isinstance(call, (ast.If, ast.While, ast.BoolOp, ast.UnaryOp, ast.Compare)):
                # read as a truth value (FourCastNet's `if self.params.save_checkpoint:` beside the method
                # `self.save_checkpoint(...)`): another object's flag of the same name, no run of this function
                continue
            if not (isinstance(call, ast.Call) and call.func is use):
                return ""  # handed on (a callback, mp.spawn's target): runs where the receiver decides
            kinds.add(self._guard(call, callers_guards))
        if kinds == {"global"}:
            return "global"
        return "local" if kinds and "" not in kinds else ""

    def _unnamed_elsewhere(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """No other file of this module's (marked) project names ``function``; False when that is not known."""
        return self.script is not None and project_names(self.script, function.name) is False

    def uses(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
        """Every read of ``function``'s name in this file: ``f`` for a function, ``x.f`` for a method where
        ``x`` may be an instance of its class (kept per function: guards ask for it again and again)."""
        if function not in self._uses_of:
            owner = self.parents.get(function)
            self._uses_of[function] = (
                [use for use in self.loaded_attrs.get(function.name, []) if self._may_be_instance(use.value, owner)]
                if isinstance(owner, ast.ClassDef) else
                [use for use in self.loaded_names.get(function.name, []) if not self._shadowed(use)])
        return self._uses_of[function]

    def _shadowed(self, use: ast.Name) -> bool:
        """``use`` reads a parameter of its own function that has the name (LSGM's ``def save_checkpoint(state,
        is_best, save)`` reading ``save`` beside the module's function ``save``), not that function."""
        scope = self.scope(use)
        arguments = getattr(scope, "args", None)
        return isinstance(arguments, ast.arguments) and use.id in {
            a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs
            + [a for a in (arguments.vararg, arguments.kwarg) if a is not None]}

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
