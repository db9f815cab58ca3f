"""``paratrain check``'s rules for the model's wrapper: DataParallel, a wrapper's state dict, BatchNorm under DDP.

What holds a DDP/DataParallel wrapper is read from the script and its project: torch's classes and the
script's own subclasses, a function of the project that returns one, a dict entry assigned one,
Accelerate's ``prepare``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.assigned_values import returned_calls
from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.project_norms import norm_aliases
from paratrain.diagnostics.script_facts import ScriptFacts, last_name, returned_module
from paratrain.diagnostics.syncbn_conversion import off_by_default, syncbn_converts
from paratrain.diagnostics.tree_walk import walk

WRAPPERS = ("DistributedDataParallel", "DDP", "DataParallel")

# A helper whose name asks whether a model is wrapped: `is_parallel`, `is_ddp`, `is_data_parallel`, `is_wrapped`.
_WRAPPER_QUESTION = re.compile(r"^is_(?:\w+_)?(?:parallel|ddp|wrapped)$")


def own_subclasses(facts: ScriptFacts, *bases: str) -> set[str]:
    """Classes of the script that derive from one of ``bases`` (directly or through each other):
    ``class KeepAttrs(torch.nn.DataParallel)`` is a DataParallel."""
    classes = [node for node in walk(facts.tree) if isinstance(node, ast.ClassDef)]
    found: set[str] = set()
    while True:
        more = {cls.name for cls in classes if cls.name not in found
                and any(last_name(base) in bases or last_name(base) in found for base in cls.bases)}
        if not more:
            return found
        found |= more


def _holder(node: ast.expr) -> str:
    """How a module is held, for matching a binding with a use: ``nets[key]`` and ``nets[k]`` (an entry
    picked by a loop variable) are one holder, ``nets[*]``; a constant key keeps its value."""
    if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
        return f"{ast.unparse(node.value)}[*]"
    return ast.unparse(node)


# Names of what Accelerate's `prepare` hands back that is a model (its optimizers, schedulers and loaders
# give their own state dicts without a prefix).
_MODEL_NAME = re.compile(r"model|net|module|encoder|decoder|generator|discriminator|transformer", re.IGNORECASE)


def _wrapper_makers(facts: ScriptFacts) -> tuple[str, ...]:
    """Callees that give a DDP/DataParallel wrapper: torch's, the script's own subclasses, a function of the
    file (SpCL's ``create_model``) or of its project that returns one (``model = get_model(conf,
    local_rank=rank)``), Accelerate's ``prepare``."""
    imported = facts.imported
    makers = {name.rpartition(".")[2] for name in (*imported.wrapper_makers, *imported.wrapper_classes)}
    own = {node.name for node in walk(facts.tree)
           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and returned_calls(node, WRAPPERS)}
    return (*WRAPPERS, *own_subclasses(facts, *WRAPPERS), *makers, *sorted(own), "prepare")


def _wrapper_holders(facts: ScriptFacts) -> set[str]:
    """Everything that holds a DDP/DataParallel wrapper: names bound to one, or to what a function of the
    project that returns one gives (``facts.names_bound_to``); entries of a dict or list assigned one
    (``nets[key] = DataParallel(nets[key])``); a model handed back by ``accelerator.prepare``
    (DistributedDataParallel in a multi-process run)."""
    wrappers = tuple(maker for maker in _wrapper_makers(facts) if maker != "prepare")  # Accelerate's: below
    held = set(facts.names_bound_to(*wrappers))
    accelerators = set(facts.names_bound_to("Accelerator"))
    for node in walk(facts.tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Subscript) and last_name(value) in wrappers:
            held.add(_holder(target))
        prepared = (last_name(value) == "prepare" and isinstance(value.func, ast.Attribute)
                    and ast.unparse(value.func.value) in accelerators)
        if not prepared:
            continue
        targets = target.elts if isinstance(target, ast.Tuple) else [target]
        if len(targets) == len(value.args):
            held.update(_holder(t) for t, arg in zip(targets, value.args) if _MODEL_NAME.search(ast.unparse(arg)))
    return held


def _wrapped_submodules(facts: ScriptFacts, wrapped: set[str]) -> dict[str, list[str]]:
    """Models some of whose own submodules were replaced by their wrappers (DLRM's ``dlrm.bot_l =
    DDP(dlrm.bot_l)``): model name → those attributes.

    Invariant: a model's state dict holds the keys of every submodule it holds, under the submodule's
    name; a submodule replaced by its wrapper adds ``module.`` inside them (``bot_l.module.0.weight``).
    Only a submodule wrapped in its own place counts: ``self.model = DDP(model)`` says nothing of ``self``."""
    found: dict[str, list[str]] = {}
    for name in sorted(wrapped):
        owner, _, attr = name.rpartition(".")
        if not owner or not owner.isidentifier():
            continue
        if any(isinstance(value, ast.Call) and value.args and ast.unparse(value.args[0]) == name
               for value in facts.assigned.get(name, [])):
            found.setdefault(owner, []).append(attr)
    return found


def wrapped_state_dict(facts: ScriptFacts) -> Iterator[Finding]:
    wrapped, makers = _wrapper_holders(facts), _wrapper_makers(facts)
    inner = _wrapped_submodules(facts, wrapped)
    for call in _passed_to_savers(facts, wrapped, makers):
        yield Finding(
            call.lineno, "wrapped-state-dict",
            f"`{facts.imported.callee(call)}` saves the state_dict of the DDP/DataParallel wrapper it is given: "
            "its keys start with 'module.', so the checkpoint loads only into a wrapped model",
            "pass the unwrapped model (model.module), or save model.module.state_dict() there; with paratrain, "
            "pt.Checkpointer or `paratrain ckpt export` (no prefixes)",
        )
    for call in facts.calls:
        made = facts.imported.wrapper_state_savers.get(facts.imported.callee(call))
        if made is not None and not facts.single_process(call):
            yield Finding(
                call.lineno, "wrapped-state-dict",
                f"`{facts.imported.callee(call)}` wraps the model in DDP/DataParallel and saves the wrapper's "
                f"state_dict ({made[0]}:{made[1]}): its keys start with 'module.', so the checkpoint loads only "
                "into a wrapped model",
                "save model.module.state_dict() there (keep the unwrapped model to save); with paratrain, "
                "pt.Checkpointer (no prefixes)",
            )
    for call in facts.calls_named("state_dict"):
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        if (owner is None or (_holder(owner) not in wrapped and _holder(owner) not in inner)
                or facts.single_process(call) or _rebound(facts, owner, call, makers)
                or _unwrapped_branch(facts, owner, call)):
            continue
        if not saved_state_dict(facts, call):
            continue
        if _holder(owner) in inner and _holder(owner) not in wrapped:
            attrs = inner[_holder(owner)]
            yield Finding(
                call.lineno, "wrapped-state-dict",
                f"`{ast.unparse(owner)}` holds DDP/DataParallel wrappers as its submodules "
                f"({', '.join(attrs)}): their state_dict keys read '{attrs[0]}.module.…', which the model "
                "without wrappers does not load",
                f"save the state dict with the wrappers taken off ({ast.unparse(owner)}.{attrs[0]}.module), or "
                "wrap the whole model once; with paratrain, pt.Checkpointer (no prefixes)",
            )
            continue
        yield Finding(
            call.lineno, "wrapped-state-dict",
            f"`{ast.unparse(owner)}` is a DDP/DataParallel wrapper: its state_dict keys start with 'module.', "
            "so the checkpoint loads only into a wrapped model (tutorials strip the prefix by hand)",
            f"save {ast.unparse(owner)}.module.state_dict(); with paratrain, pt.Checkpointer or "
            "`paratrain ckpt export` (no prefixes)",
        )


def _unwrapped_branch(facts: ScriptFacts, owner: ast.expr, call: ast.Call) -> bool:
    """``call`` runs only when ``owner`` is no wrapper: in the ``else`` of ``if hasattr(model, "module"):`` or of
    ``if isinstance(model, DistributedDataParallel):`` (or the body of their negation), in its own function.

    Invariant: a model with no ``module`` attribute, or not a DDP/DataParallel instance, is the unwrapped model,
    and its state dict keys carry no ``module.`` prefix.
    """
    holder = _holder(owner)
    child, parent = call, facts.parents.get(call)
    while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            test, negated = parent.test, False
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, negated = test.operand, True
            in_else = child in parent.orelse if isinstance(parent, ast.If) else child is parent.orelse
            if _tells_a_wrapper(test, holder) and in_else != negated:
                return True
        child, parent = parent, facts.parents.get(parent)
    return False


def _tells_a_wrapper(test: ast.expr, holder: str) -> bool:
    """``hasattr(model, "module")`` or ``isinstance(model, (DDP, nn.DataParallel))`` about ``holder``, or a helper
    named for that question (the YOLO family's ``is_parallel(model)``: ``type(model) in (DataParallel, DDP)``)."""
    if (isinstance(test, ast.Call) and len(test.args) == 1 and _holder(test.args[0]) == holder
            and _WRAPPER_QUESTION.match(last_name(test))):
        return True  # taken as asked (a wrong guess only keeps a finding back)
    if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and len(test.args) == 2
            and _holder(test.args[0]) == holder):
        return False
    if test.func.id == "hasattr":
        return isinstance(test.args[1], ast.Constant) and test.args[1].value == "module"
    return test.func.id == "isinstance" and re.search(r"DataParallel|DDP", ast.unparse(test.args[1])) is not None


def saved_state_dict(facts: ScriptFacts, call: ast.Call) -> bool:
    """The ``state_dict()`` call's value reaches a checkpoint: inside a ``save`` call, a value of a dict, or
    bound to a name that later is one of those."""
    parent = facts.parents.get(call)
    # `best = soundstream.state_dict().copy()`, `copy.deepcopy(model.state_dict())`: a copy has the same keys
    if isinstance(parent, ast.Attribute) and parent.attr == "copy" and isinstance(facts.parents.get(parent), ast.Call):
        call, parent = facts.parents[parent], facts.parents.get(facts.parents[parent])
    elif isinstance(parent, ast.Call) and last_name(parent) in ("deepcopy", "copy") and call in parent.args:
        call, parent = parent, facts.parents.get(parent)
    # `"state_dict": cpu_state if args.fsdp else model.state_dict()`: a branch of a conditional
    # expression is its value whenever that branch is taken
    while isinstance(parent, ast.IfExp) and call is not parent.test:
        call, parent = parent, facts.parents.get(parent)
    if isinstance(parent, (ast.DictComp, ast.ListComp)):  # `{key: nets[key].state_dict() for key in nets}`
        call, parent = parent, facts.parents.get(parent)
    held = parent if isinstance(parent, (ast.List, ast.Tuple)) else call  # `states = [model.state_dict(), ...]`
    return bool(facts.inside(call, "save") or isinstance(parent, ast.Dict) or _saved_later(facts, held)
                or _saved_later(facts, call))


def _passed_to_savers(facts: ScriptFacts, wrapped: set[str], makers: tuple[str, ...]) -> Iterator[ast.Call]:
    """Calls of project functions that save the state dict of a parameter (``eval_metrics(iou, args, net, …)``)
    given a wrapper there."""
    savers = facts.imported.state_dict_savers
    for call in facts.calls:
        saver = savers.get(facts.imported.callee(call))
        if saver is None or facts.single_process(call):
            continue
        positional, saved = saver
        given = dict(zip(positional, call.args)) if not any(isinstance(a, ast.Starred) for a in call.args) else {}
        given.update({kw.arg: kw.value for kw in call.keywords if kw.arg})
        if any(name in given and _holder(given[name]) in wrapped and not _rebound(facts, given[name], call, makers)
               for name in saved):
            yield call


def _rebound(facts: ScriptFacts, owner: ast.expr, call: ast.Call, makers: tuple[str, ...]) -> bool:
    """The last assignment of ``owner`` before ``call`` in the call's own function gives it another object: one
    made without ``owner`` (``inner_model = unwrap(model.inner_model)`` in a save helper), or ``owner``
    unwrapped (``discriminator = accelerator.unwrap_model(discriminator)``, ``model = model.module``). Made
    from ``owner`` otherwise (``model = model.to(device)``, ``enc, clf = load(enc, clf, path)``), it keeps it."""
    holder = _holder(owner)
    before = [node for node in walk(facts.scope(call))
              if isinstance(node, ast.Assign) and facts.scope(node) is facts.scope(call) and node.lineno < call.lineno
              and any(_holder(t) == holder for target in node.targets
                      for t in (target.elts if isinstance(target, ast.Tuple) else [target]))]
    if not before:
        return False
    value = max(before, key=lambda node: node.lineno).value
    if isinstance(value, ast.Call) and last_name(returned_module(value)) in makers:
        return False
    if (isinstance(value, ast.Call) and "unwrap" in last_name(value).lower()) or (
            isinstance(value, ast.Attribute) and value.attr == "module" and _holder(value.value) == holder):
        return True
    return not any(isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and _holder(node) == holder
                   for node in walk(value))


def _saved_later(facts: ScriptFacts, call: ast.expr) -> bool:
    """``sd = model.state_dict()`` (or ``states = [model.state_dict(), …]``) and later, in the same function,
    ``sd`` is a value of a dict or an argument of ``save``: the state dict reaches the checkpoint under
    another name."""
    name = facts.bound_name(call)
    if name is None or not name.isidentifier():
        return False
    return any(
        facts.scope(read) is facts.scope(call) and read.lineno > call.lineno
        and (isinstance(facts.parents.get(read), ast.Dict) or facts.inside(read, "save") is not None)
        for read in facts.loaded_names.get(name, [])
    )


def batchnorm_without_syncbn(facts: ScriptFacts) -> Iterator[Finding]:
    wraps = (facts.calls_named(*WRAPPERS[:2]) or facts.lightning_on_several_devices()
             or (facts.calls_named("Fabric", "Accelerator") and facts.calls_named("setup", "prepare")))
    if facts.mentions(r"SyncBatchNorm|sync_?batchnorm|syncbn|sync_bn") and syncbn_converts(
            facts.tree, facts.lines, off_by_default([facts.tree]) | facts.imported.off_options):
        return
    if not wraps:
        yield from _project_model_norms(facts)
        return
    aliases = norm_aliases(facts.tree)  # `from torch.nn import BatchNorm1d as BatchNorm`
    norms = [call for call in facts.calls if re.fullmatch(r"BatchNorm[123]d", last_name(call))
             or isinstance(call.func, ast.Name) and call.func.id in aliases]
    if norms:
        yield Finding(
            norms[0].lineno, "batchnorm-without-syncbn",
            "BatchNorm in a DistributedDataParallel model normalises with each process's own small batch: "
            "statistics differ per rank and running stats drift apart",
            "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP, or "
            "pt.Runtime(sync_batchnorm=True)",
        )
        return
    yield from _project_model_norms(facts)


def _arguments(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(kw.value for kw in call.keywords)]


def _project_model_norms(facts: ScriptFacts) -> Iterator[Finding]:
    """A model built by the script's project (``model = make_model(cfg)``) holding BatchNorm layers
    (:mod:`paratrain.diagnostics.project_norms`), reported at the build.

    Invariant: the name the build is bound to goes into DDP itself, in the script (``DDP(model, ...)``), as an
    argument of a project function that wraps in DDP (``do_train(cfg, model, ...)``), or as the module a
    Lightning Trainer that may start a process per device fits (``trainer.fit(model, dm)``, the trainer bound
    to ``Trainer.from_argparse_args(args)``: Lightning wraps it in DDP there), and neither the script
    nor any module of the project read mentions SyncBatchNorm; DataParallel and one-process code say nothing.
    The build may be moved on the way (``backbone = get_model(name).cuda()``: ``.cuda()``/``.to(device)``/
    ``.train()`` hand back the same module, so the name holds what the build made). The finding names the
    wrapping line too (its also-lines): that is where the BatchNorm model enters DDP unconverted.
    """
    imported = facts.imported
    if imported.syncbn_in_project:
        return
    # each call the model goes into, with the line that puts it in DDP (a Lightning fit: the Trainer's)
    wrapping = [(call, call.lineno) for call in facts.calls
                if last_name(call) in WRAPPERS[:2] or imported.callee(call) in imported.ddp_wrappers
                ] + _lightning_fits(facts)
    for call in facts.calls:
        found = imported.batchnorm_builders.get(imported.callee(call))
        name = facts.bound_name(_moved(facts, call)) if found is not None else None
        if name is None or facts.single_process(call):
            continue
        wraps = [line for w, line in wrapping
                 if w.lineno > call.lineno and name in {ast.unparse(returned_module(arg)) for arg in _arguments(w)}]
        if wraps:
            also = f" (also lines {wraps[0]})" if wraps[0] != call.lineno else ""
            yield Finding(
                call.lineno, "batchnorm-without-syncbn",
                f"the model `{imported.callee(call)}` builds holds BatchNorm layers ({found[0]}:{found[1]}) and goes "
                f"into DistributedDataParallel{also}: each process normalises with its own small batch, so statistics "
                "differ per rank and running stats drift apart",
                f"{name} = torch.nn.SyncBatchNorm.convert_sync_batchnorm({name}) before DDP, or "
                "pt.Runtime(sync_batchnorm=True)",
            )
            return


def _lightning_fits(facts: ScriptFacts) -> list[tuple[ast.Call, int]]:
    """``trainer.fit(model, ...)`` where every binding of ``trainer`` is a Lightning Trainer that may start a
    process per device (:meth:`ScriptFacts.lightning_on_several_devices`), with the line of the Trainer's
    construction (where its strategy, DDP, is chosen)."""
    fits = []
    for call in facts.calls_named("fit"):
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        values = facts.assigned.get(ast.unparse(owner), []) if owner is not None else []
        if values and all(isinstance(v, ast.Call) and facts.lightning_trainer_on_several_devices(v) for v in values):
            fits.append((call, values[0].lineno))
    return fits


def _moved(facts: ScriptFacts, call: ast.Call) -> ast.expr:
    """The outermost of the calls chained on ``call`` that hand back the same module (``get_model(n).cuda()``
    → the ``.cuda()`` call; :func:`returned_module` read backwards); ``call`` itself when none is."""
    value: ast.expr = call
    while True:
        attribute = facts.parents.get(value)
        outer = facts.parents.get(attribute) if isinstance(attribute, ast.Attribute) else None
        if not (isinstance(outer, ast.Call) and outer.func is attribute and returned_module(outer) is call):
            return value
        value = outer


def _replications(facts: ScriptFacts) -> list[ast.Call]:
    """torch's ``replicate(module, device_ids)``, DataParallel's scheme written out (with ``parallel_apply``):
    the first in each function."""
    first: dict[ast.AST, ast.Call] = {}
    for call in facts.calls_named("replicate"):
        if "torch.nn.parallel" in facts.full_name(call) or facts.full_name(call).startswith("nn.parallel"):
            first.setdefault(facts.scope(call), call)
    return list(first.values())


def data_parallel(facts: ScriptFacts) -> Iterator[Finding]:
    functional = [call for call in facts.calls_named("data_parallel")  # nn.parallel.data_parallel(module, x, ids)
                  if facts.full_name(call).endswith("parallel.data_parallel")]
    own = own_subclasses(facts, "DataParallel")  # `class KeepAttrs(nn.DataParallel)`
    imported = facts.imported
    # a class of the project built on DataParallel, a function of the project that wraps in it
    project = {imported.callee(call) for call in facts.calls} & (
        {name for name, base in imported.wrapper_classes.items() if base == "DataParallel"}
        | imported.data_parallel_makers)
    calls = [call for call in facts.calls if imported.callee(call) in project and isinstance(call.func, (ast.Name, ast.Attribute))]
    for call in sorted(facts.calls_named("DataParallel", *own) + functional + _replications(facts) + calls,
                       key=lambda c: c.lineno):
        yield Finding(
            call.lineno, "data-parallel",
            "nn.DataParallel drives every GPU from one process with threads: the GIL, a model copy per step "
            "and outputs gathered on GPU 0 make it slower than DistributedDataParallel even on one machine",
            "one process per GPU: paratrain run --nproc-per-node N script.py, with "
            "pt.Runtime(strategy='ddp') and rt.setup(model, optimizer)",
        )
