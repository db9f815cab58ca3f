"""The pitfalls ``paratrain check`` looks for: one function per rule, each yielding findings.

Every rule is the mistake of a real, widely copied tutorial: a finding says where, why it
is wrong in a multi-process job, and the fix. Rules stay quiet when unsure: a missed
pitfall costs less than a false alarm that teaches users to ignore the tool.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.check_finding import Finding, Rule
from paratrain.diagnostics.check_launch import deprecated_launcher, hardcoded_rendezvous, local_rank_argument
from paratrain.diagnostics.check_samplers import (
    EVAL_NAME, LOADERS, SAMPLERS, imported_sampler_bindings, is_eval, no_set_epoch, padded_eval_sampler,
    sampler_not_passed, shuffle_beside_sampler,
)
from paratrain.diagnostics.script_facts import ScriptFacts, keyword, last_name, returned_module

WRAPPERS = ("DistributedDataParallel", "DDP", "DataParallel")
_SEEDING = ("manual_seed", "seed_everything", "seed", "manual_seed_all")
_MODEL_CALL = re.compile(r"Sequential|from_pretrained|[A-Z]\w*(?:Net|Model|Classifier|ForSequenceClassification)")


# DeiT/DINO/MAE/DETR's shared `utils.init_distributed_mode(args)` reads RANK/LOCAL_RANK from the
# environment (args.gpu) and calls `setup_for_distributed(is_master)`, which replaces builtins.print
# on the other ranks: taken on its name where its file was not read.
_PRINT_SILENCING_HELPERS = ("init_distributed_mode", "setup_for_distributed")
# `sys.stdout = open(os.devnull, "w")` (under a rank test) silences print, and logging to sys.stdout set up after it.
_PRINT_SILENCED = re.compile(r"builtins\.print\s*=|__builtin__\.print\s*=|sys\.stdout\s*=\s*open\(\s*os\.devnull")
_PRINT_KEYWORDS = ("sep", "end", "file", "flush")
# A value in an f-string that tells the ranks' lines apart (f"[GPU{rank}] …", f"[{os.getpid()}] …").
_RANK_TAG = re.compile(r"\w*rank|gpu|gpu_id|getpid|device_id|\w*process_index", re.IGNORECASE)


def save_on_every_rank(facts: ScriptFacts) -> Iterator[Finding]:
    if not facts.distributed:
        return
    # `import torch as th; th.save(...)` counts, `fabric.save` does not; nor does a helper of the project
    # that saves under a rank test of its own.
    savers = set(facts.imported.unguarded_savers)
    for call in facts.calls:
        helper = facts.imported.callee(call) in savers
        if not helper and not (last_name(call) == "save" and facts.full_name(call) == "torch.save"):
            continue
        guard = facts.guard(call)
        if guard == "global" or facts.in_launcher(call) or (not helper and path_names_rank(facts, call)):
            continue
        mesh = _mesh_dims_at_zero(facts, call)
        if mesh >= {"replicate", "shard"}:  # rank 0 of its replica in the first replica: one rank
            continue
        why = (
            _MESH_SAVES[next(iter(mesh))] if mesh else
            "torch.save runs where local_rank == 0, i.e. once per machine: on several machines they all "
            "write the same checkpoint at once"
            if guard == "local" else
            "torch.save runs on every rank: all processes write the same file at once (a torn or "
            "clobbered checkpoint)"
        )
        if helper:  # the project's `save_checkpoint(...)`, read in its own file
            why = f"`{facts.imported.callee(call)}` calls torch.save with no rank test of its own; " + why
        yield Finding(call.lineno, "save-on-every-rank", why,
                      _MESH_FIX if mesh else
                      "save under `if dist.get_rank() == 0:` (pt.is_main()), or use pt.Checkpointer, which "
                      "writes atomically from the right ranks")


# Hybrid sharding (FSDP's HYBRID_SHARD, fully_shard on a 2-D DeviceMesh) picks ranks by a mesh dimension:
# `mesh.get_local_rank("replicate") == 0` is every rank of the first replica (each holds one shard), not
# one process per machine as a local rank would be; `… "shard") == 0` is one rank in every replica; both
# together are one rank of the job.
_MESH_SAVES = {
    "replicate": "torch.save runs on every rank of the first replica (the mesh's replicate rank is 0): each "
                 "of its shard ranks writes the same file at once",
    "shard": "torch.save runs on the first rank of every replica (the mesh's shard rank is 0): one writer "
             "per replica, all writing the same file at once",
}
_MESH_FIX = ("name the file after the shard rank (f\"model-{mesh.get_local_rank('shard')}.pt\") under the "
             "replicate test, or save with torch.distributed.checkpoint (each shard once), or use "
             "pt.Checkpointer with strategy='hsdp'")


def _mesh_dims_at_zero(facts: ScriptFacts, node: ast.AST) -> set[str]:
    """The DeviceMesh dimensions (``replicate``, ``shard``) that an enclosing ``if`` tests for rank 0:
    ``mesh.get_local_rank("replicate") == 0``, ``mesh["shard"].get_local_rank() == 0``."""
    dims: set[str] = set()
    child, parent = node, facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.If) and child in parent.body:
            for test in ast.walk(parent.test):
                if (isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Eq) and len(test.ops) == 1
                        and isinstance(test.left, ast.Call) and last_name(test.left) == "get_local_rank"
                        and ast.unparse(test.comparators[0]) == "0"):
                    dim = _mesh_dim(test.left)
                    dims.update(kind for kind in ("replicate", "shard") if kind in dim.lower())
        child, parent = parent, facts.parents.get(parent)
    return dims


def _mesh_dim(call: ast.Call) -> str:
    """The dimension ``get_local_rank`` asks for: its argument, or the mesh's subscript (``mesh["shard"]``)."""
    named = call.args[0] if call.args else keyword(call, "mesh_dim")
    if named is None and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Subscript):
        named = call.func.value.slice
    return named.value if isinstance(named, ast.Constant) and isinstance(named.value, str) else ""


def path_names_rank(facts: ScriptFacts, call: ast.Call) -> bool:
    """``torch.save(state, f"ckpt_rank{rank}.pt")``, or a path (or a name in it) assigned so: each rank writes a
    file of its own (a shard, its own queue), so saving on every rank is the point."""
    path = call.args[1] if len(call.args) >= 2 else next((k.value for k in call.keywords if k.arg == "f"), None)
    if path is None:
        return False
    # the path, and what the names in it were assigned: `os.path.join(d, name)` with `name = f"opt.{rank}.pt"`
    candidates = [path] + [value for node in ast.walk(path) if isinstance(node, (ast.Name, ast.Attribute))
                           for value in facts.assigned.get(ast.unparse(node), [])]
    return any(
        _RANK_TAG.fullmatch(last_name(node))
        for candidate in candidates for node in ast.walk(candidate)
        if isinstance(node, (ast.Name, ast.Attribute, ast.Call)) and node is not path
    )


def _first_of(calls: list[ast.Call], rule: str, why: str, fix: str) -> Iterator[Finding]:
    """One finding at the first of ``calls`` that names the lines of the others."""
    if calls:
        others = ", ".join(str(call.lineno) for call in calls[1:])
        yield Finding(calls[0].lineno, rule, why + (f" (also lines {others})" if others else ""), fix)


def _interpolated(arg: ast.expr) -> list[ast.expr]:
    """The values a printed argument puts into the text: an f-string's fields, ``"…".format(x)``'s and
    ``"…" % x``'s operands, or the argument itself (``print("rank", rank)``); a plain string has none."""
    if isinstance(arg, ast.Constant):
        return []
    if isinstance(arg, ast.JoinedStr):
        return [value.value for value in arg.values if isinstance(value, ast.FormattedValue)]
    if (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "format"
            and isinstance(arg.func.value, ast.Constant)):
        return [*arg.args, *(kw.value for kw in arg.keywords)]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod) and isinstance(arg.left, ast.Constant):
        return [arg.right]
    return [arg]


def _rank_tagged(call: ast.Call) -> bool:
    """The printed text names its process (f"[GPU{rank}] …", f"{rank + 1}/{world_size}",
    ``"Use GPU: {}".format(gpu)``, ``print("rank", rank)``): one line per rank is the point."""
    return any(
        isinstance(name, (ast.Name, ast.Attribute, ast.Call)) and _RANK_TAG.fullmatch(last_name(name))
        for arg in call.args for value in _interpolated(arg) for name in ast.walk(value)
    )


def _print_replaced(facts: ScriptFacts) -> bool:
    """A ``print(..., force=True)`` (or any keyword builtins.print does not take) only runs once the
    project has replaced builtins.print, as DeiT's ``setup_for_distributed`` does to quiet the other
    ranks; the call would raise TypeError otherwise."""
    return any(kw.arg is not None and kw.arg not in _PRINT_KEYWORDS
               for call in facts.calls_named("print") if isinstance(call.func, ast.Name) for kw in call.keywords)


def _print_silenced(facts: ScriptFacts) -> bool:
    """The script, or a function of its project that it calls, replaces builtins.print or stdout."""
    imported = facts.imported
    return imported.print_replaced or facts.mentions(_PRINT_SILENCED.pattern) or any(
        imported.callee(call) not in imported.read for call in facts.calls_named(*_PRINT_SILENCING_HELPERS))


def print_on_every_rank(facts: ScriptFacts) -> Iterator[Finding]:
    if not facts.distributed or _print_silenced(facts) or _print_replaced(facts):
        return
    prints = [
        call for call in facts.calls_named("print")
        if isinstance(call.func, ast.Name) and not facts.guard(call) and not facts.in_launcher(call)
        and not _rank_tagged(call)
    ]
    yield from _first_of(
        prints, "print-on-every-rank", "print runs on every rank: each line appears once per process, interleaved",
        "pt.print(...) or `if dist.get_rank() == 0:` for messages; gather values first "
        "(pt.all_reduce) when every rank's number matters",
    )


def own_subclasses(facts: ScriptFacts, *bases: str) -> set[str]:
    """Classes of the script that derive from one of ``bases`` (directly or through each other):
    ``class KeepAttrs(torch.nn.DataParallel)`` is a DataParallel."""
    classes = [node for node in ast.walk(facts.tree) if isinstance(node, ast.ClassDef)]
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
    project that returns one (``model = get_model(conf, local_rank=rank)``), Accelerate's ``prepare``."""
    makers = {name.rpartition(".")[2] for name in facts.imported.wrapper_makers}
    return (*WRAPPERS, *own_subclasses(facts, *WRAPPERS), *makers, "prepare")


def _wrapper_holders(facts: ScriptFacts) -> set[str]:
    """Everything that holds a DDP/DataParallel wrapper: names bound to one, or to what a function of the
    project that returns one gives (``facts.names_bound_to``); entries of a dict or list assigned one
    (``nets[key] = DataParallel(nets[key])``); a model handed back by ``accelerator.prepare``
    (DistributedDataParallel in a multi-process run)."""
    wrappers = tuple(maker for maker in _wrapper_makers(facts) if maker != "prepare")  # Accelerate's: below
    held = set(facts.names_bound_to(*wrappers))
    accelerators = set(facts.names_bound_to("Accelerator"))
    for node in ast.walk(facts.tree):
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


def wrapped_state_dict(facts: ScriptFacts) -> Iterator[Finding]:
    wrapped, makers = _wrapper_holders(facts), _wrapper_makers(facts)
    for call in facts.calls_named("state_dict"):
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        if (owner is None or _holder(owner) not in wrapped or facts.single_process(call)
                or _rebound(facts, owner, call, makers)):
            continue
        parent = facts.parents.get(call)
        if isinstance(parent, (ast.DictComp, ast.ListComp)):  # `{key: nets[key].state_dict() for key in nets}`
            call, parent = parent, facts.parents.get(parent)
        held = parent if isinstance(parent, (ast.List, ast.Tuple)) else call  # `states = [model.state_dict(), ...]`
        if facts.inside(call, "save") or isinstance(parent, ast.Dict) or _saved_later(facts, held):
            yield Finding(
                call.lineno, "wrapped-state-dict",
                f"`{ast.unparse(owner)}` is a DDP/DataParallel wrapper: its state_dict keys start with 'module.', "
                "so the checkpoint loads only into a wrapped model (tutorials strip the prefix by hand)",
                f"save {ast.unparse(owner)}.module.state_dict(); with paratrain, pt.Checkpointer or "
                "`paratrain ckpt export` (no prefixes)",
            )


def _rebound(facts: ScriptFacts, owner: ast.expr, call: ast.Call, makers: tuple[str, ...]) -> bool:
    """The last assignment of ``owner`` before ``call`` in the call's own function gives it another object
    (``inner_model = accelerator.unwrap_model(model.inner_model)`` in a save helper): not a wrapper, and not
    made from ``owner`` itself (``model = model.to(device)`` keeps it)."""
    holder = _holder(owner)
    before = [node for node in ast.walk(facts.scope(call))
              if isinstance(node, ast.Assign) and facts.scope(node) is facts.scope(call) and node.lineno < call.lineno
              and any(_holder(t) == holder for target in node.targets
                      for t in (target.elts if isinstance(target, ast.Tuple) else [target]))]
    if not before:
        return False
    value = max(before, key=lambda node: node.lineno).value
    if isinstance(value, ast.Call) and last_name(returned_module(value)) in makers:
        return False
    return not any(isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and _holder(node) == holder
                   for node in ast.walk(value))


def _saved_later(facts: ScriptFacts, call: ast.expr) -> bool:
    """``sd = model.state_dict()`` (or ``states = [model.state_dict(), …]``) and later, in the same function,
    ``sd`` is a value of a dict or an argument of ``save``: the state dict reaches the checkpoint under
    another name."""
    assign = facts.parents.get(call)
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
        return False
    name = assign.targets[0].id
    return any(
        facts.scope(read) is facts.scope(call) and read.lineno > call.lineno
        and (isinstance(facts.parents.get(read), ast.Dict) or facts.inside(read, "save") is not None)
        for read in facts.loaded_names.get(name, [])
    )


def batchnorm_without_syncbn(facts: ScriptFacts) -> Iterator[Finding]:
    wraps = (facts.calls_named(*WRAPPERS[:2]) or facts.lightning_on_several_devices()
             or (facts.calls_named("Fabric", "Accelerator") and facts.calls_named("setup", "prepare")))
    if not wraps or facts.mentions(r"SyncBatchNorm|sync_?batchnorm|syncbn|sync_bn"):
        return
    norms = [call for call in facts.calls if re.fullmatch(r"BatchNorm[123]d", last_name(call))]
    if norms:
        yield Finding(
            norms[0].lineno, "batchnorm-without-syncbn",
            "BatchNorm in a DistributedDataParallel model normalises with each process's own small batch: "
            "statistics differ per rank and running stats drift apart",
            "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP, or "
            "pt.Runtime(sync_batchnorm=True)",
        )


def _seedings(facts: ScriptFacts) -> list[ast.Call]:
    """Calls that seed torch's generator: ``torch.manual_seed``, ``seed_everything``, ``random.seed``
    (the rule's first reading), ``pt.Runtime(seed=...)``; not a ``torch.Generator``'s own seed."""
    generators = set(facts.names_bound_to("Generator"))
    seedings = []
    for call in facts.calls_named(*_SEEDING, "Runtime"):
        if last_name(call) == "seed" and not ast.unparse(call.func).endswith("random.seed"):
            continue
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None
        if owner is not None and (isinstance(owner, ast.Call) or ast.unparse(owner) in generators):
            continue  # torch.Generator().manual_seed(0): a private stream, the model's init is untouched
        if last_name(call) == "Runtime" and keyword(call, "seed") is None:
            continue
        seedings.append(call)
    return seedings


def _model_builds(facts: ScriptFacts) -> list[ast.Call]:
    modules = {
        node.name for node in ast.walk(facts.tree)
        if isinstance(node, ast.ClassDef) and any(last_name(base).endswith("Module") for base in node.bases)
    }
    return [call for call in facts.calls if last_name(call) in modules or _MODEL_CALL.fullmatch(last_name(call))]


def _built_for_fit(facts: ScriptFacts, fit: ast.Call, builds: list[ast.Call]) -> ast.Call | None:
    """The build of the model handed to ``pt.fit``: the call in its first argument, or the build
    assigned to the name passed there earlier in the same function."""
    model = fit.args[0] if fit.args else keyword(fit, "task")
    if model in builds:
        return model
    if not isinstance(model, (ast.Name, ast.Attribute)):
        return None
    assigned = facts.assigned.get(ast.unparse(model), [])
    return next((value for value in assigned if value in builds and facts.scope(value) is facts.scope(fit)
                 and value.lineno <= fit.lineno), None)


def model_before_seed(facts: ScriptFacts) -> Iterator[Finding]:
    builds = _model_builds(facts)
    seedings = _seedings(facts)
    for seeding in seedings:
        # A build after an earlier seeding in its function is seeded; a later seeding re-seeds what
        # follows it (cleanrl seeds alike, builds the agent, then seeds again for the rollouts).
        earlier = [b for b in builds if facts.scope(b) is facts.scope(seeding) and b.lineno < seeding.lineno
                   and not any(facts.scope(s) is facts.scope(b) and s.lineno < b.lineno for s in seedings)]
        if earlier:
            yield Finding(
                earlier[0].lineno, "model-before-seed",
                f"the model is built before the seed is set (line {seeding.lineno}): its initial weights are "
                "random, different on every run and, without DDP's broadcast, on every rank",
                "set the seed first (pt.seed_everything, torch.manual_seed, or pt.Runtime(seed=...)), then build the model",
            )
            return
    if seedings:
        return  # seeded somewhere before the build, or where this reading cannot order it: stay quiet
    # pt.fit(model, seed=S) seeds when it starts, after the model was built: S reaches the data
    # order but not the initial weights, so two runs of the script train different models.
    for fit in facts.calls_named("fit"):
        seed = keyword(fit, "seed")
        build = _built_for_fit(facts, fit, builds) if seed is not None else None
        if build is not None:
            yield Finding(
                build.lineno, "model-before-seed",
                f"the model is built before any seed is set: pt.fit(seed={ast.unparse(seed)}) at line {fit.lineno} "
                "seeds the data order, not the weights the model was built with, so every run starts elsewhere",
                f"pt.seed_everything({ast.unparse(seed)}) before building the model (or pt.Runtime(seed=...))",
            )
            return


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
    for call in sorted(facts.calls_named("DataParallel", *own) + functional + _replications(facts),
                       key=lambda c: c.lineno):
        yield Finding(
            call.lineno, "data-parallel",
            "nn.DataParallel drives every GPU from one process with threads: the GIL, a model copy per step "
            "and outputs gathered on GPU 0 make it slower than DistributedDataParallel even on one machine",
            "one process per GPU: paratrain run --nproc-per-node N script.py, with "
            "pt.Runtime(strategy='ddp') and rt.setup(model, optimizer)",
        )


# ---- logging on every rank ----------------------------------------------------------------------
# A logging setup that already tells the ranks apart: a level or handler chosen by rank (HF's
# `training_args.get_process_log_level()`, `setLevel(INFO if is_main else WARN)`), a logger made by a
# helper that takes the rank (Swin's `create_logger(dist_rank=…)`, detectron2's `setup_logger`).
_RANK_AWARE_LOG_SETUP = re.compile(r"get_process_log_level|should_log")
_LOG_SETUP_CALLS = ("basicConfig", "setLevel", "set_verbosity", "addHandler", "disable")
_LOGGER_HELPER = re.compile(r"(?:setup|init|create|get|make)_?log\w*|setup_logging|\w*_logger", re.IGNORECASE)


def _loggers(facts: ScriptFacts) -> set[str] | None:
    """Names of the stdlib loggers the script writes to (``logging`` itself, ``logging.getLogger(...)``, what a
    project's helper that sets INFO and a console handler on every rank returns); None when the script's
    logging is rank-aware or made somewhere this reading cannot see."""
    if facts.mentions(_RANK_AWARE_LOG_SETUP.pattern):
        return None
    imported = facts.imported
    if any(imported.callee(call) in imported.rank_aware_loggers for call in facts.calls):
        return None
    helpers = [call for call in facts.calls if imported.callee(call) in imported.every_rank_loggers]
    setups = facts.calls_named(*_LOG_SETUP_CALLS)
    if any(_rank_chosen(facts, call) for call in setups):
        return None
    # Without a visible level of INFO or lower, info() is dropped (the default level is WARNING), or
    # the handlers are set up in another file this reading cannot see.
    if not helpers and not any(re.search(r"INFO|DEBUG|NOTSET|\b(?:10|20)\b", ast.unparse(call)) for call in setups):
        return None
    # A logger helper of a library or of the project, called anywhere (`logger = get_logger(...)`, or
    # detectron2's `setup_logger()` on its own line), that was not read as one for every rank: it may
    # choose handlers by rank (accelerate's and detectron2's do), where this reading cannot see.
    if any(_LOGGER_HELPER.fullmatch(last_name(call)) and last_name(call) != "getLogger" and call not in helpers
           for call in facts.calls):
        return None
    names = {"logging"} if facts.modules.get("logging") == "logging" else set()
    for name, values in facts.assigned.items():
        names.update(name for value in values
                     if isinstance(value, ast.Call) and facts.full_name(value) == "logging.getLogger"
                     or value in helpers and imported.every_rank_loggers[imported.callee(value)] is None)
    for call in helpers:  # `logger, out_dir, tb_dir = create_logger(...)` (HRNet)
        index = imported.every_rank_loggers[imported.callee(call)]
        assign = facts.parents.get(call)
        if index is not None and index >= 0 and isinstance(assign, ast.Assign) and isinstance(assign.targets[0], ast.Tuple):
            items = assign.targets[0].elts
            if index < len(items) and isinstance(items[index], (ast.Name, ast.Attribute)):
                names.add(ast.unparse(items[index]))
    return names


def _rank_chosen(facts: ScriptFacts, setup: ast.Call) -> bool:
    """The level (or handler) of this setup call depends on the rank: a rank in the call
    (``setLevel(INFO if rank == 0 else WARN)``), the call under a rank test (``if rank == 0:
    logger.setLevel(INFO) else: logger.setLevel(ERROR)``), or a name it reads that is assigned so
    (``if rank == 0: level = INFO``)."""
    rank = re.compile(r"rank|main|master|process_index|primary")
    if rank.search(ast.unparse(setup)) or facts.guard(setup):
        return True
    names = {node.id for node in ast.walk(setup) if isinstance(node, ast.Name)}
    return any(rank.search(ast.unparse(value)) or facts.guard(value)
               for name in names for value in facts.assigned.get(name, []))


def _loguru_loggers(facts: ScriptFacts) -> set[str]:
    """``from loguru import logger``: its default sink writes DEBUG and up to stderr in every process, until
    the script removes it (``logger.remove()``: then it chooses the sinks, which this reading does not follow)
    or adds a sink under a rank test."""
    names = {name for name, module in facts.modules.items() if module == "loguru.logger"}
    sinks = [call for call in facts.calls_named("remove", "add", "configure")
             if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) in names]
    if any(last_name(call) in ("remove", "configure") or _rank_chosen(facts, call) for call in sinks):
        return set()
    if any(_LOGGER_HELPER.fullmatch(last_name(call)) and last_name(call) != "getLogger" for call in facts.calls):
        return set()  # a logger helper (YOLOX's `setup_logger(distributed_rank=rank)`) may choose the sinks by rank
    return names


def log_on_every_rank(facts: ScriptFacts) -> Iterator[Finding]:
    if not facts.distributed or _print_silenced(facts):
        return
    loggers = (_loggers(facts) or set()) | _loguru_loggers(facts)
    if not loggers:
        return
    logs = [
        call for call in facts.calls_named("info", "debug")
        if isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) in loggers
        and not facts.guard(call) and not facts.in_launcher(call) and not _rank_tagged(call)
    ]
    yield from _first_of(
        logs, "log-on-every-rank", "logging writes on every rank: each message appears once per process, interleaved",
        "set the level by rank once: logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING) "
        "(loguru: logger.remove(), then logger.add(sys.stderr) on rank 0 only; or pt.print for messages on rank 0)",
    )


# ---- an evaluation metric that each rank computes on its own shard ------------------------------
_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "gather", "gather_object",
    "gather_for_metrics", "reduce", "reduce_dict", "reduce_tensor", "reduce_mean", "all_reduce_mean",
    "synchronize_between_processes", "pad_across_processes", "sync", "reduce_across_processes", "gather_all",
)
_METRIC = re.compile(r"\b(?:\w*_)?(?:acc\d?|accuracy|correct|top1|top5|val_loss|eval_loss|test_loss|f1)\b", re.IGNORECASE)
_REPORTS = ("print", "info", "log", "log_dict", "add_scalar")


def _sharded_eval_loaders(facts: ScriptFacts) -> list[str]:
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


# A project's own helper named for what it does across processes (ResNeSt's `torch_dist_sum`,
# `reduce_loss_dict`, `all_gather_list`): the counts are combined there.
_REDUCING_HELPER = re.compile(
    r"\w*(?:reduce|gather)\w*|\w*dist\w*_(?:sum|mean|avg)\w*|\w*(?:sum|mean|avg)_(?:over|across)_(?:ranks|processes)\w*",
    re.IGNORECASE)


def ungathered_metric(facts: ScriptFacts) -> Iterator[Finding]:
    if not facts.distributed or facts.calls_named(*_COLLECTIVES) or facts.mentions(r"torchmetrics|evaluate\.load"):
        return
    if any(_REDUCING_HELPER.fullmatch(last_name(call)) for call in facts.calls):
        return
    loaders = _sharded_eval_loaders(facts)
    if not loaders:
        return
    # Only where this file counts the metric itself: the report sits in the function that loops over
    # the loader (a metric from another file's `evaluate()` may be reduced there).
    loops = {
        facts.scope(node) for node in ast.walk(facts.tree)
        if isinstance(node, ast.For) and any(ast.unparse(n) in loaders for n in ast.walk(node.iter))
    }
    for call in facts.calls_named(*_REPORTS):
        if facts.scope(call) not in loops:
            continue
        if any(_METRIC.search(ast.unparse(arg)) for arg in list(call.args) + [k.value for k in call.keywords]):
            yield Finding(
                call.lineno, "ungathered-metric",
                f"this metric is computed from `{loaders[0]}`, of which each rank sees its own shard, and is "
                "never reduced across ranks: every process reports a different number, none of them the whole set's",
                "sum the counts over ranks first (dist.all_reduce(torch.tensor([correct, total]))), or "
                "rt.gather(preds, labels) / accelerator.gather_for_metrics(...) before computing the metric",
            )
            return


# ---- a split or shuffle that differs per rank ----------------------------------------------------
_SEED_CALL = re.compile(r"\w*seed\w*")
_PER_RANK = re.compile(r"rank|process_index|get_rank|getpid", re.IGNORECASE)


def unseeded_split(facts: ScriptFacts) -> Iterator[Finding]:
    if not facts.distributed:
        return
    splits = [call for call in facts.calls_named("random_split") if keyword(call, "generator") is None]
    subsets = " ".join(ast.unparse(call) for call in facts.calls_named("Subset"))
    splits += [
        call for call in facts.calls_named("shuffle", "permutation")
        if re.search(r"(?:^|\.)random\.(?:shuffle|permutation)$", facts.full_name(call))
        and call.args and isinstance(call.args[0], ast.Name) and re.search(rf"\b{call.args[0].id}\b", subsets)
    ]
    # A dataset's own `.shuffle()` (Hugging Face datasets) with no seed: a different order per process,
    # which the Trainer's or a DistributedSampler's sharding by index then splits into overlapping parts.
    splits += [
        call for call in facts.calls_named("shuffle")
        if isinstance(call.func, ast.Attribute) and not call.args and not call.keywords
        and isinstance(call.func.value, (ast.Subscript, ast.Name, ast.Attribute))
    ]
    # A dataset class that shuffles its samples when it is built (FastChat's flan-t5 dataset): each rank
    # builds its own copy, and a sampler or the Trainer shards it by index. Where the seeding sits is not
    # ordered against the class body by line, so any seeding in the file keeps this quiet.
    if not [call for call in facts.calls if _SEED_CALL.fullmatch(last_name(call))]:
        splits += [call for call in facts.calls_named("shuffle", "permutation")
                   if re.search(r"(?:^|\.)random\.(?:shuffle|permutation)$", facts.full_name(call))
                   and call not in splits and _in_dataset_build(facts, call)]
    for split in splits:
        seeds = [call for call in facts.calls if _SEED_CALL.fullmatch(last_name(call)) and call.lineno < split.lineno
                 and last_name(call) not in ("seed",) or (last_name(call) == "seed" and "random" in ast.unparse(call.func)
                                                          and call.lineno < split.lineno)]
        alike = [call for call in seeds if not _PER_RANK.search(ast.unparse(call))]
        if alike and len(alike) == len(seeds):
            continue  # seeded with the same value on every rank before the split
        why = ("the seed set before it differs per rank" if seeds else "nothing seeds it before")
        yield Finding(
            split.lineno, "unseeded-split",
            f"`{last_name(split)}` draws a random split on every rank and {why}: each rank trains and evaluates "
            "on a different split (a sample may be in one rank's training set and another's test set)",
            "pass a generator seeded alike everywhere: random_split(ds, sizes, generator=torch.Generator().manual_seed(0)); "
            "seed per rank only after the split",
        )


def _in_dataset_build(facts: ScriptFacts, node: ast.AST) -> bool:
    """``node`` is in a method of a ``Dataset`` subclass other than the per-item ones."""
    method = facts.scope(node)
    cls = facts.parents.get(method)
    return (isinstance(cls, ast.ClassDef) and any(last_name(base).endswith("Dataset") for base in cls.bases)
            and getattr(method, "name", "") not in ("__getitem__", "__iter__", "__len__"))


RULES: tuple[Rule, ...] = (
    sampler_not_passed, shuffle_beside_sampler, no_set_epoch, padded_eval_sampler, local_rank_argument,
    deprecated_launcher, hardcoded_rendezvous, save_on_every_rank, print_on_every_rank, wrapped_state_dict,
    batchnorm_without_syncbn, model_before_seed, data_parallel, log_on_every_rank, ungathered_metric,
    unseeded_split,
)
