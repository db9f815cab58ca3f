"""Which functions of a script's project write checkpoints, and on which processes those writes run.

The saver questions of :mod:`paratrain.diagnostics.project_facts`: a project function's checkpoint writes (what the
script's own rule counts, :func:`~paratrain.diagnostics.check_rules.checkpoint_writer`), whether each runs on every
rank, once per machine, or under a rank test of its own, and which parameters' ``state_dict()`` it saves.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from paratrain.diagnostics.check_rules import checkpoint_writer, path_names_rank
from paratrain.diagnostics.check_wrappers import saved_state_dict
from paratrain.diagnostics.dead_code import never_runs
from paratrain.diagnostics.project_imports import Module
from paratrain.diagnostics.project_savers import (
    in_memory,
    nested_call_guarded,
    per_rank_path,
    under_rank_flag,
    under_rank_test,
)
from paratrain.diagnostics.script_facts import ScriptFacts, last_name
from paratrain.diagnostics.tree_walk import walk

_WRITES = ("save", "save_file", "save_model", "save_pretrained")  # the last names checkpoint_writer knows
_Function = ast.FunctionDef | ast.AsyncFunctionDef


class ProjectCheckpoints:
    """One script's reading of its project's checkpoint writes.

    ``facts_of`` gives a module's :class:`ScriptFacts` (made once by the caller); ``rank_flags`` are the script's
    attributes set to a rank-0 test (:func:`~paratrain.diagnostics.project_savers.stored_rank_flags`)."""

    def __init__(self, facts_of: Callable[[Module], ScriptFacts], rank_flags: set[str]) -> None:
        self._facts_of = facts_of
        self.rank_flags = rank_flags
        self._writes: dict[_Function, tuple[ScriptFacts | None, list[ast.Call]]] = {}  # _writes_of

    def _writes_of(self, module: Module, function: _Function) -> tuple[ScriptFacts | None, list[ast.Call]]:
        """The module's reading and the checkpoint writes of the body that can run (what the script's own rule counts:
        :func:`checkpoint_writer`); none in a decorated function (a decorator may run it on rank 0 only, as ResNeSt's
        ``@master_only``). The module is read only for a function that writes; asked twice per function."""
        if function not in self._writes:
            self._writes[function] = self._find_checkpoint_writes(module, function)
        return self._writes[function]

    def _find_checkpoint_writes(self, module: Module, function: _Function) -> tuple[ScriptFacts | None, list[ast.Call]]:
        if function.decorator_list or not any(isinstance(node, ast.Call) and last_name(node) in _WRITES
                                              for node in walk(function)):
            return None, []
        mf = self._facts_of(module)
        return mf, [node for node in walk(function) if isinstance(node, ast.Call) and last_name(node) in _WRITES
                    and checkpoint_writer(mf, node) and not never_runs(mf, node)]

    def unguarded_saves(self, module: Module, function: _Function) -> list[ast.Call]:
        """The checkpoint writes of the body that can run (:meth:`_writes_of`), when each has no rank test
        around it there and writes into a path that does not name the rank, else none."""
        mf, saves = self._writes_of(module, function)
        return [] if not saves or any(mf.guard_in_function(save) or under_rank_test(function, save)
                                       or under_rank_flag(function, save, self.rank_flags)
                                       or path_names_rank(mf, save) or per_rank_path(function, save)
                                       or in_memory(function, save) or nested_call_guarded(mf, function, save)
                                       for save in saves) else saves

    def saves_once_per_machine(self, module: Module, function: _Function) -> bool:
        """Every checkpoint write of the body that can run sits under a local-rank test of its own there, or in its
        one-process branch (Person re-ID's ``save_network(..., local_rank)``: ``if local_rank > -1: if local_rank ==
        0: torch.save(...)`` ``else: torch.save(...)``): once per machine."""
        mf, saves = self._writes_of(module, function)
        kinds = {mf.guard_in_function(save) for save in saves if not in_memory(function, save)
                 and not path_names_rank(mf, save) and not per_rank_path(function, save)}
        return "local" in kinds and kinds <= {"local", "global"}  # "global": a one-process branch beside it

    def saved_state_dicts(self, module: Module, function: _Function) -> set[str]:
        """The parameters whose ``state_dict()`` the function saves (:meth:`saved_state_dict_lines`)."""
        return set(self.saved_state_dict_lines(module, function))

    def saved_state_dict_lines(self, module: Module, function: _Function) -> dict[str, int]:
        """Each parameter whose ``state_dict()`` the function saves (in a ``save`` call, as a value of a dict, or
        bound to a name that reaches one of those), never rebound in it (``net = net.module``) nor unwrapped
        there — what the caller passes is what is saved — with the line of the first such ``state_dict()``."""
        calls = [node for node in walk(function) if isinstance(node, ast.Call) and last_name(node) == "state_dict"
                 and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)]
        params = {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs} - {"self"}
        calls = [call for call in calls if call.func.value.id in params]
        if not calls:
            return {}
        mf = self._facts_of(module)
        rebound = {t.id for node in walk(function) if isinstance(node, (ast.Assign, ast.AugAssign, ast.For, ast.With))
                   for target in (node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)])
                   if target is not None for t in walk(target) if isinstance(t, ast.Name)}
        # `model.module.state_dict() if distributed else model.state_dict()` (CvT), `hasattr(net, "module")`: the
        # function tells a wrapper apart itself
        unwrapped = {node.value.id for node in walk(function) if isinstance(node, ast.Attribute)
                     and node.attr == "module" and isinstance(node.value, ast.Name)} | {
            node.args[0].id for node in walk(function) if isinstance(node, ast.Call) and last_name(node) == "hasattr"
            and node.args and isinstance(node.args[0], ast.Name)}
        lines: dict[str, int] = {}
        for call in sorted(calls, key=lambda call: call.lineno):
            if (call.func.value.id not in rebound | unwrapped and not mf.single_process(call)
                    and saved_state_dict(mf, call)):
                lines.setdefault(call.func.value.id, call.lineno)
        return lines
