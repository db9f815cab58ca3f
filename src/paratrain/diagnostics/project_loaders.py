"""The DistributedSamplers inside the loaders a project's builder function hands back to the script.

    samplers = loader_samplers(imports, module, function, call, index)

For ``valid_loader = build_dataloader(config, False, distributed)`` (CvT), a builder chosen by a name the script
binds only to project builders (``loader_class = build_dist_loaders if … else build_dataloaders``: each must
give such a loader) or ``…, data_loader_val, mixup_fn =
build_loader(config, logger, is_pretrain=False)`` (SimMIM), the builder's returned value (the ``index``-th item
of a returned tuple) is followed to a ``DataLoader(…, sampler=…)`` whose sampler is torch's ``DistributedSampler``:
written there, or a name the builder assigned one (either branch of ``DistributedSampler(ds) if distributed
else None``: the sampler of a distributed run), or what a project function it returns the result of
(``return build_loader_finetune(config, logger)``) gives, followed ``_HOPS`` calls deep.

Only what the builder's code shows for this call counts: the call's constant arguments (and the parameters'
constant defaults) decide the builder's ``if``s that test them (``if is_train:`` with ``False`` passed runs
the ``else``), and a branch they rule out is not followed; a test they do not decide may run either way
(``if distributed:``). A loader of anything else (a timm loader, a sampler from a variable given in) is
an unknown and left out.
"""

from __future__ import annotations

import ast

from paratrain.diagnostics.call_names import last_name
from paratrain.diagnostics.project_imports import Module, ProjectImports
from paratrain.diagnostics.script_facts import ScriptFacts
from paratrain.diagnostics.tree_walk import children, walk

_HOPS = 2
_Function = ast.FunctionDef | ast.AsyncFunctionDef


def loader_bindings(imports: ProjectImports, facts: ScriptFacts) -> list[tuple[str, ast.Call, list[ast.Call]]]:
    """Each name the script binds to a loader that a project builder returns with a DistributedSampler
    (``valid_loader = build(cfg, False)``; ``…, loader_val, mixup = build_loader(cfg)``, by position)."""
    found = []
    for node in walk(facts.tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, (ast.Name, ast.Attribute))):
            continue
        target, call = node.targets[0], node.value
        names = ([(target, None)] if isinstance(target, (ast.Name, ast.Attribute)) else
                 list(zip(target.elts, range(len(target.elts)))) if isinstance(target, ast.Tuple) else [])
        if not names or any(isinstance(t, ast.Starred) for t, _ in names):
            continue
        builders = _builders(imports, facts, ast.unparse(call.func))
        if not builders:
            continue
        for held, index in names:
            # a name bound to several builders (`loader_class = build_dist_loaders if dist else build_loaders`):
            # each of them must return such a loader there
            each = [loader_samplers(imports, *builder, call, index) for builder in builders]
            if all(each) and isinstance(held, (ast.Name, ast.Attribute)):
                found.append((ast.unparse(held), call, each[0]))  # one finding: the first builder's
    return found


def _builders(imports: ProjectImports, facts: ScriptFacts, callee: str) -> list[tuple[Module, _Function]]:
    """The project functions ``callee`` runs: one the script imports, or every one of the project functions a
    name the script binds only to those holds (``f = a if test else b``; ``f = a``); empty otherwise."""
    builder = imports.function(callee)
    if builder is not None:
        return [builder]
    values = facts.assigned.get(callee, [])
    names = [item for value in values for item in ((value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,))]
    found = [imports.function(ast.unparse(name)) if isinstance(name, (ast.Name, ast.Attribute)) else None for name in names]
    return [builder for builder in found if builder is not None] if names and all(found) else []


def loader_samplers(imports: ProjectImports, module: Module, function: _Function, call: ast.Call,
                    index: int | None, hops: int = _HOPS) -> list[ast.Call]:
    """The DistributedSampler calls of the loader ``function`` returns (its ``index``-th item when it returns a
    tuple) when called as ``call`` (see the module's docstring)."""
    builder = _Builder(function, _constants(function, call))
    found: list[ast.Call] = []
    for value, inner_index in builder.returned(index):
        if isinstance(value, ast.Call) and last_name(value) == "DataLoader" and inner_index is None:
            found += [sampler for sampler in builder.samplers_of(value) if _torchs(module, sampler)]
        elif hops and isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
            inner = _project_function(imports, module, ast.unparse(value.func))
            if inner is not None:
                found += loader_samplers(imports, *inner, value, inner_index, hops - 1)
    return found


def _torchs(module: Module, call: ast.Call) -> bool:
    """The called name comes from torch wherever the module imports it (NVIDIA semantic-segmentation's
    ``from datasets.sampler import DistributedSampler``, which need not pad, is not)."""
    root = call.func
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    sources = []
    for node in walk(module.tree):
        if isinstance(node, ast.Import):
            sources += [a.name for a in node.names if (a.asname or a.name.split(".")[0]) == root.id]
        elif isinstance(node, ast.ImportFrom):
            sources += [node.module or "" for a in node.names if (a.asname or a.name) == root.id]
    return bool(sources) and all(source == "torch" or source.startswith("torch.") for source in sources)


def _project_function(imports: ProjectImports, module: Module, name: str) -> tuple[Module, _Function] | None:
    for stmt in module.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return module, stmt
    return imports.function(name, within=module)


def _constants(function: _Function, call: ast.Call) -> dict[str, object]:
    """The function's parameters that are constants for this call: passed as constants, or left to a
    constant default."""
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]
    defaults = function.args.defaults
    bound: dict[str, object] = {}
    for name, default in zip(positional[len(positional) - len(defaults):], defaults):
        if isinstance(default, ast.Constant):
            bound[name] = default.value
    for name, default in zip([a.arg for a in function.args.kwonlyargs], function.args.kw_defaults):
        if isinstance(default, ast.Constant):
            bound[name] = default.value
    if any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
        return {}  # *args/**kwargs: which parameter gets what is not known
    for name, arg in zip(positional, call.args):
        if isinstance(arg, ast.Constant):
            bound[name] = arg.value
        else:
            bound.pop(name, None)
    for kw in call.keywords:
        if isinstance(kw.value, ast.Constant):
            bound[kw.arg] = kw.value.value
        else:
            bound.pop(kw.arg, None)
    return bound


class _Builder:
    """One builder function read for one call: which of its statements may run, what its names hold."""

    def __init__(self, function: _Function, bound: dict[str, object]) -> None:
        self.function = function
        self.bound = bound
        self.parents = {child: parent for parent in walk(function) for child in children(parent)}

    def returned(self, index: int | None) -> list[tuple[ast.expr, int | None]]:
        """The values the function may return (their ``index``-th items), names followed to what was
        assigned them, each with the index still to take from it: a returned call of another function is
        kept whole when the item is to be taken from what it returns."""
        found = []
        for ret in (n for n in walk(self.function) if isinstance(n, ast.Return) and n.value is not None):
            if not self.may_run(ret):
                continue
            value, rest = ret.value, index
            if index is not None and isinstance(value, ast.Tuple):
                if index >= len(value.elts) or any(isinstance(e, ast.Starred) for e in value.elts):
                    continue
                value, rest = value.elts[index], None
            elif index is not None and not isinstance(value, ast.Call):
                continue
            found += [(item, rest) for item in self.values_of(value)]
        return found

    def values_of(self, value: ast.expr) -> list[ast.expr]:
        if isinstance(value, ast.Name):
            return [node.value for node in walk(self.function) if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets) and self.may_run(node)]
        return [value]

    def samplers_of(self, loader: ast.Call) -> list[ast.Call]:
        given = next((kw.value for kw in loader.keywords if kw.arg == "sampler"), None)
        values = self.values_of(given) if given is not None else []
        # `DistributedSampler(valid) if args.distributed else None`: the sampler of a distributed run
        values = [branch for v in values for branch in ((v.body, v.orelse) if isinstance(v, ast.IfExp) else (v,))]
        return [v for v in values if isinstance(v, ast.Call) and last_name(v) == "DistributedSampler"]

    def may_run(self, node: ast.AST) -> bool:
        """No ``if`` around ``node`` has a test this call's constants decide against the branch it is in."""
        child, parent = node, self.parents.get(node)
        while parent is not None:
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and parent is not self.function:
                return False  # a nested function's: not this function's own
            if isinstance(parent, ast.If):
                test = self._evaluate(parent.test)
                if test is not None and (test is False) == any(child is s for s in parent.body):
                    return False
            child, parent = parent, self.parents.get(parent)
        return True

    def _evaluate(self, test: ast.expr) -> bool | None:
        """The test's truth for this call's constants; None when they do not decide it."""
        if isinstance(test, ast.Name):
            return bool(self.bound[test.id]) if test.id in self.bound else None
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._evaluate(test.operand)
            return None if inner is None else not inner
        if isinstance(test, ast.BoolOp):
            values = [self._evaluate(v) for v in test.values]
            decisive = isinstance(test.op, ast.Or)  # `or`: one True decides; `and`: one False
            if decisive in values:
                return decisive
            return None if None in values else not decisive
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
                and isinstance(test.left, ast.Name) and test.left.id in self.bound
                and isinstance(test.comparators[0], ast.Constant)):
            equal = self.bound[test.left.id] == test.comparators[0].value
            return equal if isinstance(test.ops[0], ast.Eq) else not equal
        return None
