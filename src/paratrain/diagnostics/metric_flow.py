"""A metric that a function of the script counts over the loader it is handed, followed to where it is reported.

``train_acc = compute_accuracy(model, train_loader)`` then ``print(train_acc)``: when ``train_loader`` draws
from a DistributedSampler, the function counts only this rank's shard, so the number reported is one rank's.

Invariant: a value keeps the loader it was counted over. A metric is known to be one shard's when the
script's own function loops over the parameter that received a sharded loader, is named for (or returns) a
metric, and its result, bound to a name, is reported in the same function; or when a loop over a sharded
evaluation loader sums a total (``total_val_loss += loss``) that a metric is then made of
(``result["val_loss"] = total_val_loss.item() / len(eval_dataloader)``) and reported or compared in the same
function. Anything less (the loader reaches the function under another name, the function is another file's,
the result is never reported) says nothing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.sampler_makers import EVAL_NAME, LOADERS, SAMPLERS, imported_sampler_bindings, is_eval
from paratrain.diagnostics.script_facts import ScriptFacts, keyword, last_name
from paratrain.diagnostics.tree_walk import walk

__all__ = ["metric_over_shard", "sharded_eval_loaders", "sharded_loaders", "total_over_shard"]

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def sharded_loaders(facts: ScriptFacts) -> set[str]:
    """Names bound to a DataLoader whose ``sampler=`` is a DistributedSampler, made there or held by a name."""
    samplers = {name for name, _ in [*facts.names_bound_to(*SAMPLERS).items(), *imported_sampler_bindings(facts)]}
    found = set()
    for name, loader in facts.names_bound_to(*LOADERS).items():
        sampler = keyword(loader, "sampler")
        if sampler is not None and (isinstance(sampler, ast.Call) and last_name(sampler) in SAMPLERS
                                    or ast.unparse(sampler) in samplers):
            found.add(name)
    return found


def sharded_eval_loaders(facts: ScriptFacts) -> list[str]:
    """Evaluation loaders whose data each rank sees a part of: built on an evaluation DistributedSampler,
    or handed to ``accelerator.prepare`` / ``fabric.setup_dataloaders``."""
    samplers = {name for name, call in [*facts.names_bound_to(*SAMPLERS).items(), *imported_sampler_bindings(facts)]
                if is_eval(name, call)}
    loaders = [name for name, call in facts.names_bound_to(*LOADERS).items()
               if keyword(call, "sampler") is not None and ast.unparse(keyword(call, "sampler")) in samplers]
    for call in facts.calls_named("prepare", "setup_dataloaders"):
        loaders += [ast.unparse(arg) for arg in call.args if EVAL_NAME.search(ast.unparse(arg))
                    and "loader" in ast.unparse(arg).lower()]
    return loaders


def total_over_shard(facts: ScriptFacts, loaders: list[str], metric: re.Pattern[str],
                     reports: tuple[str, ...]) -> Iterator[tuple[ast.Assign | ast.Compare, str]]:
    """Assignments of a metric made from a total that a loop over one of ``loaders`` summed, after that loop and
    in its function, where the metric's name is then reported (a call named in ``reports`` reads it) or compared
    (the best-checkpoint test); else the total itself compared with the best so far there: each with the
    loader's name. The script is assumed to reduce nothing (the rule
    returns before this for a file with a collective)."""
    for loop in walk(facts.tree):
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        loader = next((ast.unparse(n) for n in walk(loop.iter) if ast.unparse(n) in loaders), None)
        totals = {node.target.id for node in walk(loop)
                  if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name)}
        if loader is None or not totals:
            continue
        scope = facts.scope(loop)
        after = [node for node in walk(scope) if getattr(node, "lineno", 0) > (loop.end_lineno or loop.lineno)]
        made = next((node for node in after
                     if isinstance(node, ast.Assign) and len(node.targets) == 1
                     and metric.search(ast.unparse(node.targets[0]))
                     and totals & _names(node.value) and _used_later(facts, scope, node, reports)), None)
        # The total itself against the best so far (`if valid_rec_loss < best_val_loss:`): the loop is over
        # evaluation data, so what it sums is an evaluation figure whatever its name.
        made = made or next((node for node in after if isinstance(node, ast.Compare) and _against_best(node, totals)),
                            None)
        if made is not None:
            yield made, loader


def _against_best(compare: ast.Compare, totals: set[str]) -> bool:
    """``compare`` orders one of ``totals`` against a name of the best value (``valid_loss < best_val_loss``)."""
    sides = [compare.left, *compare.comparators]
    return (len(sides) == 2 and all(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in compare.ops)
            and any(isinstance(side, ast.Name) and side.id in totals for side in sides)
            and any("best" in ast.unparse(side).lower() for side in sides))


def _used_later(facts: ScriptFacts, scope: ast.AST, assign: ast.Assign, reports: tuple[str, ...]) -> bool:
    """The name ``assign`` binds (for ``result["val_loss"] = …``, ``result``) is read after it in ``scope`` by a
    report or a comparison."""
    target = assign.targets[0]
    while isinstance(target, (ast.Subscript, ast.Attribute)):
        target = target.value
    if not isinstance(target, ast.Name):
        return False
    readers = [node for node in walk(scope) if getattr(node, "lineno", 0) > assign.lineno
               and (isinstance(node, ast.Compare) or isinstance(node, ast.Call) and last_name(node) in reports)]
    return any(target.id in _names(reader) for reader in readers)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in walk(node) if isinstance(n, ast.Name)}


def metric_over_shard(facts: ScriptFacts, loaders: set[str], metric: re.Pattern[str],
                      reports: tuple[str, ...]) -> Iterator[tuple[ast.Call, str]]:
    """Calls of the script's own functions that count ``metric`` over one of ``loaders`` and whose result is
    reported (a call named in ``reports`` reads the name it is bound to): each with the loader's name."""
    functions = {node.name: node for node in facts.tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    reported: dict[ast.AST, list[tuple[int, set[str]]]] = {}  # function → (line, names read) of each report
    for report in facts.calls_named(*reports):
        reported.setdefault(facts.scope(report), []).append((report.lineno, _names_read(report)))
    for call in facts.calls:
        function = functions.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if function is None:
            continue
        loader = next((ast.unparse(arg) for arg, param in _arguments(call, function)
                       if ast.unparse(arg) in loaders and _loops_over(function, param)), None)
        if loader is None or not _names_a_metric(function, metric):
            continue
        name, scope = facts.bound_name(call), facts.scope(call)
        if name is None or not name.isidentifier():
            continue
        if any(line > call.lineno and name in names for line, names in reported.get(scope, [])):
            yield call, loader


def _arguments(call: ast.Call, function: _Function) -> Iterator[tuple[ast.expr, str]]:
    """Each argument of ``call`` with the parameter of ``function`` it binds."""
    params = [arg.arg for arg in function.args.posonlyargs + function.args.args]
    for arg, param in zip(call.args, params):
        if not isinstance(arg, ast.Starred):
            yield arg, param
    for kw in call.keywords:
        if kw.arg is not None:
            yield kw.value, kw.arg


def _loops_over(function: _Function, param: str) -> bool:
    """A ``for`` of ``function`` reads ``param`` as it is (``for x, y in loader``, ``enumerate(loader)``)."""
    if any(isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr))
           and any(isinstance(t, ast.Name) and t.id == param for t in _targets(node)) for node in walk(function)):
        return False  # rebound before the loop: another value
    return any(isinstance(node, (ast.For, ast.AsyncFor))
               and any(isinstance(n, ast.Name) and n.id == param for n in walk(node.iter))
               for node in walk(function))


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [n for t in node.targets for n in walk(t)]
    return list(walk(node.target))


def _names_a_metric(function: _Function, metric: re.Pattern[str]) -> bool:
    """The function is named for a metric (``compute_accuracy``) or returns one (``return correct / total``)."""
    returns = [node.value for node in walk(function) if isinstance(node, ast.Return) and node.value is not None]
    return bool(metric.search(function.name)) or any(metric.search(ast.unparse(value)) for value in returns)


def _names_read(report: ast.Call) -> set[str]:
    return {node.id for arg in [*report.args, *(kw.value for kw in report.keywords)] for node in walk(arg)
            if isinstance(node, ast.Name)}
