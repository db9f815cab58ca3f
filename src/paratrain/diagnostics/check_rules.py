"""The pitfalls ``paratrain check`` looks for: one function per rule, each yielding findings (``RULES``; the
output, wrapper, sampler, launch and rendezvous rules live in ``check_output``, ``check_logs``, ``check_wrappers``,
``check_samplers``, ``check_launch`` and ``check_rendezvous``).

Every rule is the mistake of a real, widely copied tutorial: a finding says where, why it
is wrong in a multi-process job, and the fix. Rules stay quiet when unsure: a missed
pitfall costs less than a false alarm that teaches users to ignore the tool.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.check_finding import Finding, Rule
from paratrain.diagnostics.check_launch import deprecated_launcher, local_rank_argument
from paratrain.diagnostics.check_rendezvous import hardcoded_rendezvous, one_machine_only
from paratrain.diagnostics.check_logs import log_on_every_rank, project_call_logs
from paratrain.diagnostics.check_output import RANK_TAG, print_on_every_rank, project_call_prints
from paratrain.diagnostics.check_samplers import (
    no_set_epoch, padded_eval_sampler, prepared_loader_dropped, sampler_not_passed, shuffle_beside_sampler,
)
from paratrain.diagnostics.check_wrappers import batchnorm_without_syncbn, data_parallel, wrapped_state_dict
from paratrain.diagnostics.dead_code import never_runs
from paratrain.diagnostics.lightning_metrics import unsynced_monitored_log
from paratrain.diagnostics.metric_flow import metric_over_shard, sharded_eval_loaders, sharded_loaders, total_over_shard
from paratrain.diagnostics.project_savers import in_memory
from paratrain.diagnostics.argument_needs import passes_all
from paratrain.diagnostics.script_facts import ScriptFacts, is_true, keyword, last_name
from paratrain.diagnostics.tree_walk import walk

_SEEDING = ("manual_seed", "seed_everything", "seed", "manual_seed_all")
_MODEL_CALL = re.compile(r"Sequential|from_pretrained|[A-Z]\w*(?:Net|Model|Classifier|ForSequenceClassification)")


def save_on_every_rank(facts: ScriptFacts) -> Iterator[Finding]:
    if not facts.distributed:
        return
    # `import torch as th; th.save(...)` counts, `fabric.save` does not; nor does a helper of the project
    # that saves under a rank test of its own.
    savers, per_machine = set(facts.imported.unguarded_savers), facts.imported.machine_savers
    found: list[tuple[ast.Call, str, str]] = []
    for call in facts.calls:
        machine = facts.imported.callee(call) in per_machine  # the helper tests the local rank itself
        helper = facts.imported.callee(call) in savers or machine
        writer = checkpoint_writer(facts, call)
        if not helper and writer is None:
            continue
        if helper and not _saves_when_called_so(facts, call):
            continue
        guard = facts.guard(call) or ("local" if machine else "")
        if guard == "global" or facts.in_launcher(call) or never_runs(facts, call) or _trainer_save_hook(facts, call) or (
                not helper and path_names_rank(facts, call)):
            continue
        if guard == "local" and one_machine_only(facts):  # once per machine, on the one machine it can use
            continue
        mesh = _mesh_dims_at_zero(facts, call)
        if mesh >= {"replicate", "shard"}:  # rank 0 of its replica in the first replica: one rank
            continue
        writer = writer or "its checkpoint write"  # a helper's: torch.save, save_pretrained or safetensors
        why = (
            _MESH_SAVES[next(iter(mesh))] if mesh else
            f"{writer} runs where local_rank == 0, i.e. once per machine: on several machines they all "
            "write the same checkpoint at once"
            if guard == "local" else
            f"{writer} runs on every rank: all processes write the same file at once (a torn or "
            "clobbered checkpoint)"
        )
        if machine:  # the project's `save_network(..., local_rank)`, whose own test is the local rank's
            why = f"`{facts.imported.callee(call)}` writes a checkpoint under a local-rank test of its own; " + why
        elif helper:  # the project's `save_checkpoint(...)`, read in its own file
            why = f"`{facts.imported.callee(call)}` writes a checkpoint with no rank test of its own; " + why
        found.append((call, why, _MESH_FIX if mesh else
                      "save under `if dist.get_rank() == 0:` (pt.is_main()), or use pt.Checkpointer, which "
                      "writes atomically from the right ranks"))
    # The saves of one block (distil-whisper's feature extractor, tokenizer, config and model written one after
    # another into a checkpoint directory) are one problem with one fix: one finding at the first, naming the others.
    groups: dict[tuple[int, str], list[tuple[ast.Call, str, str]]] = {}
    for item in found:
        groups.setdefault(_block_of(facts, item[0]), []).append(item)
    for items in groups.values():
        call, why, fix = items[0]
        also = sorted({other.lineno for other, _, _ in items[1:]} - {call.lineno})
        if also:
            why += f" (also lines {', '.join(map(str, also))})"
        yield Finding(call.lineno, "save-on-every-rank", why, fix)


def _trainer_save_hook(facts: ScriptFacts, call: ast.Call) -> bool:
    """``call`` is in ``_save`` of a Hugging Face ``Trainer`` subclass (llm2vec's) that nothing in the file calls
    itself: the Trainer calls it only where ``args.should_save`` holds, on the main process. A direct
    ``trainer._save(...)`` (Video-ChatGPT's ``safe_save_model_for_hf_trainer``) runs wherever it is made."""
    function = facts.scope(call)
    owner = facts.parents.get(function)
    return (getattr(function, "name", "") == "_save" and isinstance(owner, ast.ClassDef)
            and any(last_name(base).endswith("Trainer") for base in owner.bases) and not facts.loaded_attrs.get("_save"))


def _block_of(facts: ScriptFacts, node: ast.AST) -> tuple[int, str]:
    """The statement list that holds ``node``'s statement: its owner and the field (``body``, ``orelse``…)."""
    statement = node
    while statement is not None and not isinstance(statement, ast.stmt):
        statement = facts.parents.get(statement)
    owner = facts.parents.get(statement)
    for field in ("body", "orelse", "handlers", "finalbody"):
        if statement in (getattr(owner, field, None) or []):
            return id(owner), field
    return id(statement), ""


def checkpoint_writer(facts: ScriptFacts, call: ast.Call) -> str | None:
    """What writes a checkpoint file in ``call``: ``torch.save``, safetensors' ``save_file``/``save_model``, or a
    Hugging Face ``x.save_pretrained(dir)`` (a model's, a tokenizer's, a config's) that is not told which
    process is the main one (``is_main_process=accelerator.is_main_process`` makes it rank-aware); else None."""
    name = last_name(call)
    if name == "save" and facts.full_name(call) == "torch.save":
        # into an io.BytesIO: a copy in memory to send or compare (mdetr's all_gather), no file
        return None if in_memory(facts.scope(call), call) else "torch.save"
    if name in ("save_file", "save_model") and facts.full_name(call).startswith("safetensors."):
        return f"safetensors' {name}"
    if name == "save_pretrained" and isinstance(call.func, ast.Attribute) and not any(
            kw.arg == "is_main_process" and not is_true(kw.value) for kw in call.keywords) and not _own_method(facts, call):
        return f"`{ast.unparse(call.func)}`"
    return None


def _own_method(facts: ScriptFacts, call: ast.Call) -> bool:
    """``self.save_pretrained(...)`` inside a class of the file that defines ``save_pretrained`` itself (trlx's
    trainer, whose own ``save_pretrained`` passes ``is_main_process`` on): a call of its own code, whose saves are
    judged where they are written, not Hugging Face's."""
    if not (isinstance(call.func, ast.Attribute) and ast.unparse(call.func.value) in ("self", "cls")):
        return False
    node = facts.parents.get(call)
    while node is not None and not isinstance(node, ast.ClassDef):
        node = facts.parents.get(node)
    return node is not None and any(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and
                                    item.name == call.func.attr for item in node.body)


def _saves_when_called_so(facts: ScriptFacts, call: ast.Call) -> bool:
    """The project's saver may save when called with these arguments: some save of it has every argument it
    needs passed (:func:`~paratrain.diagnostics.argument_needs.needed_arguments`)."""
    entry = facts.imported.saver_arguments.get(facts.imported.callee(call))
    if entry is None:
        return True
    positional, needs = entry
    return any(passes_all(call, positional, need) for need in needs)


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
            for test in walk(parent.test):
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
    candidates = [path] + [value for node in walk(path) if isinstance(node, (ast.Name, ast.Attribute))
                           for value in facts.assigned.get(ast.unparse(node), [])]
    return any(
        RANK_TAG.fullmatch(last_name(node))
        for candidate in candidates for node in walk(candidate)
        if isinstance(node, (ast.Name, ast.Attribute, ast.Call)) and node is not path
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
        node.name for node in walk(facts.tree)
        if isinstance(node, ast.ClassDef) and any(last_name(base).endswith("Module") for base in node.bases)
    }
    return [call for call in facts.calls if (last_name(call) in modules or _MODEL_CALL.fullmatch(last_name(call)))
            and not _weightless(call)]


# `AutoTokenizer.from_pretrained(...)`, a config's or a processor's: no weights, nothing random to seed (SMDM)
_WEIGHTLESS = re.compile(r"Tokenizer\w*|\w*Config|\w*Processor|\w*FeatureExtractor|\w*tokenizer\w*", re.IGNORECASE)


def _weightless(call: ast.Call) -> bool:
    return (last_name(call) == "from_pretrained" and isinstance(call.func, ast.Attribute)
            and bool(_WEIGHTLESS.fullmatch(last_name(call.func.value) if isinstance(call.func.value, (ast.Name, ast.Attribute)) else "")))


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


# ---- an evaluation metric that each rank computes on its own shard ------------------------------
_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "gather", "gather_object",
    "gather_for_metrics", "reduce", "reduce_dict", "reduce_tensor", "reduce_mean", "all_reduce_mean",
    "synchronize_between_processes", "pad_across_processes", "sync", "reduce_across_processes", "gather_all",
)
_METRIC = re.compile(r"\b(?:\w*_)?(?:acc\d?|accuracy|correct|top1|top5|val_loss|eval_loss|test_loss|f1)\b", re.IGNORECASE)
_REPORTS = ("print", "info", "log", "log_dict", "add_scalar")


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
    for call, loader in metric_over_shard(facts, sharded_loaders(facts), _METRIC, _REPORTS):
        yield _ungathered(call.lineno, loader)
        return
    loaders = sharded_eval_loaders(facts)
    if not loaders:
        return
    for assign, loader in total_over_shard(facts, loaders, _METRIC, _REPORTS):
        yield _ungathered(assign.lineno, loader)
        return
    # Only where this file counts the metric itself: the report sits in the function that loops over
    # the loader (a metric from another file's `evaluate()` may be reduced there).
    loops = {
        facts.scope(node) for node in walk(facts.tree)
        if isinstance(node, ast.For) and any(ast.unparse(n) in loaders for n in walk(node.iter))
    }
    for call in facts.calls_named(*_REPORTS):
        if facts.scope(call) not in loops:
            continue
        if any(_METRIC.search(ast.unparse(arg)) for arg in list(call.args) + [k.value for k in call.keywords]):
            yield _ungathered(call.lineno, loaders[0])
            return


def _ungathered(line: int, loader: str) -> Finding:
    return Finding(
        line, "ungathered-metric",
        f"this metric is computed from `{loader}`, of which each rank sees its own shard, and is "
        "never reduced across ranks: every process reports a different number, none of them the whole set's",
        "sum the counts over ranks first (dist.all_reduce(torch.tensor([correct, total]))), or "
        "rt.gather(preds, labels) / accelerator.gather_for_metrics(...) before computing the metric",
    )


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
    # A dataset's own `.shuffle()` (Hugging Face datasets, PyG) with no seed: a different order per process,
    # which the Trainer's or a DistributedSampler's sharding by index then splits into overlapping parts. The
    # dataset may be the value of a chain (`ds.map(tokenize).shuffle()`, `TUDataset(path).shuffle()`).
    splits += [
        call for call in facts.calls_named("shuffle")
        if isinstance(call.func, ast.Attribute) and not call.args and not call.keywords
        and isinstance(call.func.value, (ast.Subscript, ast.Name, ast.Attribute, ast.Call))
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
            split.func.end_lineno or split.lineno, "unseeded-split",  # `.shuffle()` ending a chain: its own line
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
    sampler_not_passed, prepared_loader_dropped, shuffle_beside_sampler, no_set_epoch, padded_eval_sampler, local_rank_argument,
    deprecated_launcher, hardcoded_rendezvous, save_on_every_rank, print_on_every_rank, project_call_prints, wrapped_state_dict,
    batchnorm_without_syncbn, model_before_seed, data_parallel, log_on_every_rank, project_call_logs, ungathered_metric,
    unsynced_monitored_log, unseeded_split,
)
