"""The DistributedSampler pitfalls of ``paratrain check``: a sampler no loader uses, shuffle beside a
sampler, no ``set_epoch``, and evaluation data sharded with padding.

A sampler is followed by the name it is bound to, or, unnamed, from the DataLoader call that makes it
(or that calls a function of the file returning one: :mod:`~paratrain.diagnostics.sampler_makers`); loaders read
in a single pass need no set_epoch.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.dead_code import never_read
from paratrain.diagnostics.library_calls import ignite_eval_loaders
from paratrain.diagnostics.project_mentions import project_calls
from paratrain.diagnostics.sampler_makers import (
    EVAL_NAME, LOADERS, SAMPLERS, first_arg, imported_sampler_bindings, in_script, is_eval, names_of, sampler_makers,
)
from paratrain.diagnostics.script_facts import ScriptFacts, is_true, keyword, last_name
from paratrain.diagnostics.tree_walk import walk

_SAMPLER_KEYS = ("sampler", "batch_sampler")


def _sampler_uses(facts: ScriptFacts) -> set[str]:
    """Text of every value passed as ``sampler=``/``batch_sampler=`` (either side of ``s if train else None``),
    or put under that key of a dict (``kwargs = {"sampler": s}; DataLoader(ds, **kwargs)``); a sampler stored in
    a container whose items are passed so (mace's ``valid_samplers[head] = valid_sampler``, then
    ``sampler=valid_samplers[head]``) is passed too."""
    passed = {
        ast.unparse(choice)
        for call in facts.calls
        for value in (keyword(call, key) for key in _SAMPLER_KEYS)
        if value is not None
        for choice in _alternatives(value)
    }
    containers = {text.partition("[")[0] for text in passed if "[" in text}
    passed |= {ast.unparse(node.value) for node in walk(facts.tree) if isinstance(node, ast.Assign)
               for target in node.targets
               if isinstance(target, ast.Subscript) and ast.unparse(target.value) in containers}
    in_dicts = {
        ast.unparse(value)
        for node in walk(facts.tree) if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values)
        if isinstance(key, ast.Constant) and key.value in _SAMPLER_KEYS
    }
    return passed | in_dicts


def _handed_on(facts: ScriptFacts, name: str) -> bool:
    """``name`` is an argument of a call other than a DataLoader: the callee (maybe in another
    file, like pytorch/examples' FSDP ``train(..., sampler=sampler1)``) may call ``set_epoch``; or it is stored in a
    container whose items get ``set_epoch`` (3detr: ``dataloaders[split + "_sampler"] = sampler``, then
    ``dataloaders["train_sampler"].set_epoch(epoch)``)."""
    loaders_by_parameter = _loaders_by_parameter(facts)
    for call in facts.calls:
        if last_name(call) in LOADERS or call in loaders_by_parameter or _torch_batch_sampler(facts, call):
            continue
        values = list(call.args) + [kw.value for kw in call.keywords]
        if any(ast.unparse(choice) == name for value in values for choice in _alternatives(value)):
            return True
    containers = {ast.unparse(target.value) for node in walk(facts.tree) if isinstance(node, ast.Assign)
                  and ast.unparse(node.value) == name for target in node.targets if isinstance(target, ast.Subscript)}
    return any(isinstance(call.func, ast.Attribute) and call.func.attr == "set_epoch"
               and isinstance(call.func.value, ast.Subscript) and ast.unparse(call.func.value.value) in containers
               for call in facts.calls)


def _torch_batch_sampler(facts: ScriptFacts, call: ast.Call) -> bool:
    """torch's own ``BatchSampler(sampler, …)``: it hands its sampler's indices on in batches and never calls
    ``set_epoch`` (a project's batch sampler may), so a sampler given to it is not handed to someone who might."""
    return last_name(call) == "BatchSampler" and facts.full_name(call).startswith("torch.")


def _batch_samplers_of(facts: ScriptFacts, name: str) -> set[str]:
    """The names bound to a torch ``BatchSampler`` of sampler ``name``: a DataLoader given one of them
    (``batch_sampler=``) holds the sampler too."""
    return {bound for bound, values in facts.assigned.items() for value in values
            if isinstance(value, ast.Call) and _torch_batch_sampler(facts, value)
            and any(ast.unparse(argument) == name for argument in value.args[:1] + [keyword(value, "sampler")]
                    if argument is not None)}


def _made_for_each_pass(facts: ScriptFacts, sampler: ast.Call, held: set[str]) -> bool:
    """The sampler is made again in the loop that reads it, once per pass (sheeprl's SAC draws a new
    ``DistributedSampler`` over each freshly gathered batch and reads it through a ``BatchSampler`` in the same
    iteration): every ``for`` over it (or over what ``held`` names hold it) sits in the loop that makes it. No
    sampler lives for a second epoch, so none needs ``set_epoch``."""
    made_in = _innermost_loop(facts, sampler)
    reads = [node for node in walk(facts.scope(sampler)) if isinstance(node, (ast.For, ast.AsyncFor))
             and ast.unparse(node.iter) in held]
    return made_in is not None and bool(reads) and all(_innermost_loop(facts, read) is made_in for read in reads)


def _innermost_loop(facts: ScriptFacts, node: ast.AST) -> ast.AST | None:
    """The nearest loop of ``node``'s own function that holds it (None outside loops)."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)):
            return parent
        parent = facts.parents.get(parent)
    return None


def _for_evaluation(facts: ScriptFacts, node: ast.AST) -> bool:
    """``node`` runs only when the data is not for training: in the ``else:`` of ``if is_train:``, or under
    ``if not training:`` / ``if split == "test":`` (hysts' ``create_dataloader(config, is_train)``)."""
    child, parent = node, facts.parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(parent, ast.If):
            test = parent.test
            negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
            text = ast.unparse(test.operand if negated else test)
            training = re.fullmatch(r"(?:\w+\.)*(?:is_)?train(?:ing)?", text) is not None
            in_else = any(child is stmt for stmt in parent.orelse)
            if training and in_else != negated:
                return True
            if not in_else and not negated and re.search(r"==\s*['\"](?:val|valid|validation|test|eval)['\"]", text):
                return True
        child, parent = parent, facts.parents.get(parent)
    return False


def _returned(facts: ScriptFacts, name: str, sampler: ast.Call) -> bool:
    """The function that binds ``name`` to ``sampler`` returns it (alone, or in a tuple or dict): TimeSformer's
    ``create_sampler`` builds it for ``loader.py``, which passes it to the DataLoader."""
    scope = facts.scope(sampler)
    return any(isinstance(node, ast.Return) and node.value is not None and facts.scope(node) is scope
               and any(isinstance(n, ast.Name) and n.id == name for n in walk(node.value))
               for node in walk(scope))


def _returned_to_a_caller_that_sets_epochs(facts: ScriptFacts, names: set[str]) -> bool:
    """One of ``names`` (a sampler, or a loader) is returned, or a DataLoader given one is, and another file of the
    project calls ``set_epoch``: the caller that gets it may set the epoch (FocalNet's ``build_loader`` returns
    its loaders, and main.py calls ``data_loader_train.sampler.set_epoch(epoch)``). Without such a file
    nothing sets it, and the finding stands."""
    loaders = {loader for name in names for loader, values in facts.assigned.items() for value in values
               if isinstance(value, ast.Call) and last_name(value) in LOADERS
               and any(ast.unparse(choice) == name for key in _SAMPLER_KEYS
                       for choice in _alternatives(keyword(value, key)) if keyword(value, key) is not None)}
    handed_back = {ast.unparse(node) for ret in walk(facts.tree) if isinstance(ret, ast.Return) and ret.value
                   for node in walk(ret.value) if isinstance(node, (ast.Name, ast.Attribute))}
    return bool(handed_back & (names | loaders)) and facts.script is not None and project_calls(facts.script, "set_epoch")


def _alternatives(value: ast.expr) -> list[ast.expr]:
    """The values an argument may be: itself, or each side of an ``or`` or a conditional expression (minimind's
    ``SkipBatchSampler(train_sampler or indices, ...)``: the sampler where there is one)."""
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        return [choice for operand in value.values for choice in _alternatives(operand)]
    if isinstance(value, ast.IfExp):
        return [*_alternatives(value.body), *_alternatives(value.orelse)]
    return [value]


_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.comprehension)


def _in_loop(facts: ScriptFacts, node: ast.AST) -> bool:
    """A loop of ``node``'s own function (or of the module, outside functions) repeats it."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(parent, _LOOPS):
            return True
        parent = facts.parents.get(parent)
    return False


def _runs_once(facts: ScriptFacts, node: ast.AST, depth: int = 0) -> bool:
    """No loop repeats ``node``: none in its function, whose every call (followed a few levels up) is
    outside loops too, or which is handed to ``mp.spawn``-like launchers (once per process)."""
    if _in_loop(facts, node):
        return False
    function = facts.scope(node)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    if depth >= 3 or isinstance(facts.parents.get(function), ast.ClassDef):
        return False  # a method may be called from anywhere
    for use in facts.loaded_names.get(function.name, []):
        call = facts.parents.get(use)
        if not isinstance(call, ast.Call):
            return False
        if call.func is not use and last_name(call) not in ("spawn", "start_processes"):
            return False  # handed on: the receiver may call it again and again
        if not _runs_once(facts, call, depth + 1):
            return False
    return True


def _read_once(facts: ScriptFacts, sampler: str) -> bool:
    """Every DataLoader drawing from ``sampler`` is read by ``for`` loops that run once (a tutorial's single
    pass, directly or in a function of the file it is handed to under the same name): there is no
    second epoch for ``set_epoch`` to reshuffle. Any other use (``cycle(loader)``, ``iter(loader)``, an
    attribute) may read it again."""
    def draws_from_sampler(value: ast.expr) -> bool:
        given = (keyword(value, "sampler"), keyword(value, "batch_sampler"))
        return any(v is not None and ast.unparse(v) == sampler for v in given)

    loaders = {name for name, values in facts.assigned.items() for value in values
               if isinstance(value, ast.Call) and last_name(value) in LOADERS and draws_from_sampler(value)}
    return _loaders_read_once(facts, loaders)


def _loaders_read_once(facts: ScriptFacts, loaders: set[str]) -> bool:
    """Every read of these DataLoader variables is a ``for`` pass that runs once (see ``_read_once``)."""
    if not loaders:
        return False
    passes = 0
    for node in walk(facts.tree):
        if not (isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load)
                and ast.unparse(node) in loaders):
            continue
        read, parent = node, facts.parents.get(node)
        if isinstance(parent, ast.Call) and last_name(parent) in ("enumerate", "tqdm") and node in parent.args:
            read, parent = parent, facts.parents.get(parent)
        if isinstance(parent, (ast.For, ast.AsyncFor)) and read is parent.iter:
            if not _runs_once(facts, parent):
                return False
            passes += 1
        elif isinstance(parent, ast.Call) and last_name(parent) == "len":
            continue
        elif (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name)
              and parent.func.id in facts.own_functions and read in parent.args):
            callee = next((f for f in walk(facts.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and f.name == parent.func.id), None)
            if callee is None or ast.unparse(node) not in {a.arg for a in callee.args.args}:
                return False  # read under another name there
        else:
            return False
    return passes > 0


def _remainder_loader(facts: ScriptFacts) -> ast.Call | None:
    """A ``Subset`` of the samples past ``len(sampler) * world_size``: the tail that a
    ``drop_last=True`` sampler leaves out, evaluated on its own (pytorch/examples' imagenet)."""
    def text(call: ast.Call) -> str:  # the call and the plain assignments of the names it reads
        names = {node.id for node in walk(call) if isinstance(node, ast.Name)}
        return " ".join([ast.unparse(call)] + [ast.unparse(v) for n in names for v in facts.assigned.get(n, [])])

    return next((
        call for call in facts.calls_named("Subset")
        if re.search(r"world_size|num_replicas|\.sampler\b", text(call))
    ), None)


def sampler_not_passed(facts: ScriptFacts) -> Iterator[Finding]:
    used = _sampler_uses(facts)
    for name, sampler in facts.names_bound_to(*SAMPLERS).items():
        if name in used or _handed_on(facts, name) or _returned(facts, name, sampler) or _batch_samplers_of(facts, name):
            continue  # BatchSampler(sampler, …), a helper that builds the loader, a caller: it reaches a loader there
        dataset = first_arg(sampler)
        loader = next((c for c in facts.calls_named(*LOADERS) if dataset and first_arg(c) == dataset), None)
        where = f"the DataLoader at line {loader.lineno} reads" if loader else "every DataLoader reads"
        yield Finding(
            sampler.lineno, "sampler-not-passed",
            f"DistributedSampler `{name}` is created but never passed to a DataLoader: {where} the whole dataset "
            "on every rank, so each rank trains on all of it (N times the work, no speed-up)",
            f"DataLoader({dataset or 'dataset'}, ..., sampler={name}) without shuffle=True; or "
            f"rt.loader({dataset or 'dataset'}, batch_size, shuffle=True), which shards and reshuffles for you",
        )


def prepared_loader_dropped(facts: ScriptFacts) -> Iterator[Finding]:
    """``dit, optimizer, _, sched = accelerator.prepare(dit, optimizer, deepcopy(loader), sched)``, then ``for batch in
    loader:`` (x-flux): the loader Accelerate shards for each rank is thrown away, and the loop reads the one it was
    given, the whole dataset on every rank. Reported under sampler-not-passed, whose harm it is."""
    for call in facts.calls_named("prepare"):
        holder = facts.parents.get(call)
        if not (isinstance(call.func, ast.Attribute) and isinstance(holder, ast.Assign) and len(holder.targets) == 1
                and isinstance(holder.targets[0], ast.Tuple) and len(holder.targets[0].elts) == len(call.args)):
            continue
        for target, argument in zip(holder.targets[0].elts, call.args):
            given = argument.args[0] if isinstance(argument, ast.Call) and last_name(argument) == "deepcopy" and argument.args else argument
            if not (isinstance(target, ast.Name) and target.id == "_" and isinstance(given, ast.Name)
                    and _a_loader(facts, given.id) and _iterated_after(facts, given.id, call)):
                continue
            yield Finding(
                argument.lineno, "sampler-not-passed",
                f"the loader `{ast.unparse(call.func.value)}.prepare` shards for each rank is thrown away (`_`), and the "
                f"loop reads `{given.id}`: every rank trains on the whole dataset (N times the work, no speed-up)",
                f"keep what prepare returns and iterate it: `..., {given.id}, ... = {ast.unparse(call.func)}(...)`",
            )


def _a_loader(facts: ScriptFacts, name: str) -> bool:
    return "loader" in name.lower() or any(isinstance(v, ast.Call) and last_name(v) in LOADERS
                                           for v in facts.assigned.get(name, []))


def _iterated_after(facts: ScriptFacts, name: str, call: ast.Call) -> bool:
    """``for … in name`` or ``for … in enumerate(name)`` after ``call`` in its function."""
    scope = facts.scope(call)
    return any(isinstance(node, ast.For) and node.lineno > call.lineno and facts.scope(node) is scope
               and any(isinstance(n, ast.Name) and n.id == name for n in walk(node.iter))
               for node in walk(scope))


def shuffle_beside_sampler(facts: ScriptFacts) -> Iterator[Finding]:
    for call in facts.calls_named(*LOADERS):
        if is_true(keyword(call, "shuffle")) and keyword(call, "sampler") is not None:
            yield Finding(
                call.lineno, "shuffle-with-sampler",
                "DataLoader gets shuffle=True and a sampler: torch refuses the pair (ValueError), the sampler "
                "already decides the order",
                "drop shuffle=True (DistributedSampler shuffles; call sampler.set_epoch(epoch) every epoch)",
            )


def no_set_epoch(facts: ScriptFacts) -> Iterator[Finding]:
    if facts.mentions(r"\.sampler\.set_epoch\("):
        return
    for name, sampler in facts.bindings(*SAMPLERS) + imported_sampler_bindings(facts):
        shuffle = keyword(sampler, "shuffle")
        if (is_eval(name, sampler) or (isinstance(shuffle, ast.Constant) and shuffle.value is False)
                or _for_evaluation(facts, sampler)):
            continue  # evaluation order does not matter
        held = {name} | _batch_samplers_of(facts, name)
        if (_handed_on(facts, name) or _read_once(facts, name) or _returned_to_a_caller_that_sets_epochs(facts, held)
                or _in_lightning_module(facts, sampler) or _made_for_each_pass(facts, sampler, held)):
            continue
        # aot-benchmark's `train_sampler = self.train_sampler`, then `train_sampler.set_epoch(epoch)`: a name for it
        aliases = {alias for alias, values in facts.assigned.items() if any(ast.unparse(v) == name for v in values)}
        if not any(facts.mentions(rf"{re.escape(held)}\.set_epoch\(") for held in {name} | aliases):
            yield Finding(
                sampler.lineno, "no-set-epoch",
                f"`{name}.set_epoch(epoch)` is never called: DistributedSampler then shuffles every epoch "
                "in the same order (epoch 0's)",
                f"call {name}.set_epoch(epoch) at the start of every epoch; rt.loader(...) does it for you",
            )
    for sampler, loader in _unnamed_samplers(facts):
        if _in_lightning_module(facts, sampler):
            continue
        yield Finding(
            sampler.lineno, "no-set-epoch",
            f"the DistributedSampler of the DataLoader at line {loader.lineno} never gets set_epoch (the file "
            "has no `.sampler.set_epoch(epoch)`): it shuffles every epoch in the same order (epoch 0's)",
            "bind the sampler to a name and call sampler.set_epoch(epoch) at the start of every epoch (or "
            "loader.sampler.set_epoch(epoch)); rt.loader(...) does it for you",
        )


def _in_lightning_module(facts: ScriptFacts, node: ast.AST) -> bool:
    """``node`` is in a method of a LightningModule or LightningDataModule of the file (longformer's
    ``_get_dataloader``, which ``train_dataloader`` returns): Lightning's fit loop calls ``set_epoch`` on the
    sampler of the loader it trains on, every epoch."""
    parent = facts.parents.get(node)
    while parent is not None and not isinstance(parent, ast.ClassDef):
        parent = facts.parents.get(parent)
    return parent is not None and any(re.search(r"Lightning(?:Data)?Module$", ast.unparse(base)) for base in parent.bases)


def _unnamed_samplers(facts: ScriptFacts) -> Iterator[tuple[ast.Call, ast.Call]]:
    """(sampler, loader) for a shuffling training DistributedSampler made inside the DataLoader call,
    ``DataLoader(ds, sampler=DistributedSampler(ds))``, or by a function of this file that returns one,
    ``DataLoader(ds, sampler=data_sampler(ds, shuffle=True))``, whose loader is read more than once.
    Called only where the file has no ``.sampler.set_epoch(``."""
    makers = sampler_makers(facts)
    reported = set()
    for loader in facts.calls_named(*LOADERS) + _loaders_by_parameter(facts):
        sampler_argument = keyword(loader, "sampler")
        # either side of `DistributedSampler(ds) if ddp else None` (UniTS's data_provider)
        for given in _alternatives(sampler_argument) if sampler_argument is not None else []:
            if isinstance(given, ast.Call):
                yield from _unnamed_samplers_given(facts, makers, reported, loader, given)


def _unnamed_samplers_given(facts: ScriptFacts, makers: dict[str, list[ast.Call]], reported: set[ast.Call],
                            loader: ast.Call, given: ast.Call) -> Iterator[tuple[ast.Call, ast.Call]]:
    """The ``_unnamed_samplers`` of one ``sampler=`` call of ``loader``."""
    samplers = [given] if last_name(given) in SAMPLERS else makers.get(ast.unparse(given.func), [])
    for sampler in (in_script(facts, sampler, given) for sampler in samplers):
        shuffles = [keyword(sampler, "shuffle"), keyword(given, "shuffle")]
        if any(isinstance(s, ast.Constant) and s.value is False for s in shuffles):
            continue
        dataset = first_arg(loader) or first_arg(given)
        if (EVAL_NAME.search(dataset) or sampler in reported or _loaders_read_once(facts, names_of(facts, loader))
                or _returned_to_a_caller_that_sets_epochs(facts, names_of(facts, loader))):
            continue
        reported.add(sampler)
        yield sampler, loader


def _loaders_by_parameter(facts: ScriptFacts) -> list[ast.Call]:
    """Calls of a function's parameter whose default is a DataLoader class (svoice's ``def loader(dataset, ...,
    klass=DataLoader, **kwargs)`` returning ``klass(dataset, ..., sampler=sampler)``): a DataLoader, unless a caller
    passes another class."""
    loaders = []
    for call in facts.calls:
        if not isinstance(call.func, ast.Name):
            continue
        function = facts.scope(call)
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = function.args
        positional = arguments.posonlyargs + arguments.args
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults):]], arguments.defaults))
        defaults.update({a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None})
        default = defaults.get(call.func.id)
        if isinstance(default, (ast.Name, ast.Attribute)) and last_name(default) in LOADERS:
            loaders.append(call)
    return loaders


def _eval_samplers(facts: ScriptFacts) -> Iterator[tuple[str, ast.Call]]:
    """(name, sampler) for each DistributedSampler over evaluation data: bound to a name, made inside a
    DataLoader call (``valid_loader = DataLoader(valid, sampler=DistributedSampler(valid))``), or returned
    by a function of the file or of its project (HRNet's ``test_sampler = get_sampler(test_dataset)``)."""
    makers = sampler_makers(facts)
    seen = set()
    made = [(name, call) for name, values in facts.assigned.items() for call in values if isinstance(call, ast.Call)
            and makers.get(ast.unparse(call.func))]
    inline = [(" ".join(sorted(names_of(facts, loader))) + " " + first_arg(loader), keyword(loader, "sampler"))
              for loader in facts.calls_named(*LOADERS) if isinstance(keyword(loader, "sampler"), ast.Call)]
    # a loader a project builder returns with a DistributedSampler in it (project_loaders.py)
    built = {(name, id(call)): samplers for name, call, samplers in facts.imported.loader_bindings}
    candidates = (list(facts.names_bound_to(*SAMPLERS).items()) + made + inline
                  + [(name, call) for name, call, _ in facts.imported.loader_bindings])
    for name, call in candidates:
        samplers = ([call] if last_name(call) in SAMPLERS else built.get((name, id(call)))
                    or makers.get(ast.unparse(call.func), []))
        for made in samplers:
            elsewhere = made not in facts.parents  # made in another file: reported at this file's call
            if elsewhere and any(kw.arg == "drop_last" and not isinstance(kw.value, ast.Constant) for kw in made.keywords):
                continue  # pads or drops as its caller there says: unknown here
            key = (made, call) if elsewhere else made
            sampler = in_script(facts, made, call)
            if key not in seen and (is_eval(name, sampler) or is_eval(name, call)):
                seen.add(key)
                yield name.strip(), sampler


def padded_eval_sampler(facts: ScriptFacts) -> Iterator[Finding]:
    # A COCO evaluator keys detections by image id, so a padded duplicate is counted once (DETR).
    if facts.mentions(r"CocoEvaluator|coco_evaluator"):
        return
    for name, sampler in _eval_samplers(facts):
        if never_read(facts, name, LOADERS, "sampler"):
            continue  # a loader nothing iterates evaluates nothing
        if is_true(keyword(sampler, "drop_last")):
            if _remainder_loader(facts):
                continue  # the dropped tail is evaluated apart: every sample once
            why = ("drops the last samples so every rank gets as many: metrics leave some samples out and "
                   "change with the number of processes")
        else:
            why = ("repeats samples so every rank gets as many: metrics count some samples twice and change "
                   "with the number of processes")
        yield Finding(
            sampler.lineno, "padded-eval-sampler",
            f"`{name}` shards evaluation data with DistributedSampler, which {why}",
            "rt.loader(dataset, batch_size, exact=True) (every sample exactly once) and rt.gather(preds, labels)",
        )
    for name, loader in ignite_eval_loaders(facts, EVAL_NAME):  # pytorch-ignite's idist.auto_dataloader
        yield Finding(
            loader.lineno, "padded-eval-sampler",
            f"`{name}` comes from idist.auto_dataloader, which shards it with DistributedSampler on several processes: "
            "it repeats samples so every rank gets as many, so metrics count some samples twice and change with "
            "the number of processes",
            "rt.loader(dataset, batch_size, exact=True) (every sample exactly once) and rt.gather(preds, labels)",
        )
