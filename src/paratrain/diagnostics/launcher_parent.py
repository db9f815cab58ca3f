"""The code of a script that runs only in the parent that starts the ranks, not in the ranks themselves.

``mp.spawn(main_worker)``, detectron2's ``launch(main, …)`` or a submitit executor under ``if __name__ ==
"__main__":`` start processes that import the file under another name: what sits beside that call (or in a
function called only from there) runs once, in the parent. So does a block that ends the program before a
launcher call later in its function. :class:`LauncherParent` is a part of
:class:`~paratrain.diagnostics.script_facts.ScriptFacts`.
"""

from __future__ import annotations

import ast

from paratrain.diagnostics.call_names import last_name

# Calls that start the ranks from a parent process: `mp.spawn(main_worker, …)`, detectron2's
# `launch(main, …)`, `start_processes(fn, …)`, Fabric's `fabric.launch()`; `Process(target=worker, …).start()`
# of a script that starts its own processes (one per GPU).
_LAUNCHERS = ("spawn", "launch", "start_processes", "Process")
# submitit's executors start `tasks_per_node` copies of what `executor.submit(fn)` is handed, on a cluster.
JOB_EXECUTORS = ("AutoExecutor", "SlurmExecutor")
# Ends a block before anything after it runs.
_EXITS = ("exit", "quit", "_exit")


class LauncherParent:
    """The launcher questions of :class:`~paratrain.diagnostics.script_facts.ScriptFacts`."""

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
        executors = {name for name in self.names_bound_to(*JOB_EXECUTORS)}
        submits = [call for call in self.calls_named("submit", "map_array")
                   if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) in executors]
        for call in self.calls_named(*_LAUNCHERS) + submits:
            # the target is a function of this file, or, for torch's starters, one it imports (univnet's
            # `from utils.train import train; mp.spawn(train, …)`): not the `__main__` the children run
            # (LSGM's `Process(target=utils.init_processes, args=(rank, size, main, args))`: a function of a
            # module it imports, reached through the module's name)
            imported = last_name(call) in ("spawn", "start_processes", "Process")
            targets = own | (set(self.modules) if imported else set())
            if call not in submits and not any(self._names_a_target(arg, targets, imported)
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

    def _names_a_target(self, arg: ast.expr, targets: set[str], imported: bool) -> bool:
        """``arg`` names a function that the launcher starts: one of ``targets``, or, where imported functions
        count, ``module.function`` of a module this file imports."""
        if isinstance(arg, ast.Name):
            # PointNeXt's `main = pretrain if … else train`, then `mp.spawn(main, …)`: a name for one of them
            values = [choice for v in self.assigned.get(arg.id, [])
                      for choice in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
            return arg.id in targets or bool(values) and all(
                isinstance(v, ast.Name) and v.id in targets for v in values)
        return (imported and isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name)
                and arg.value.id in self.modules)

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
