"""Calls of libraries that ``paratrain check`` knows by what they do across processes.

accelerate's logging adapter writes on the main process only; PEFT's ``print_trainable_parameters()``, the
standard library's ``pprint`` and tqdm's ``write`` print in every process that calls them; pytorch-ignite's ``idist`` starts processes (``idist.Parallel``, ``idist.spawn``),
builds loaders on a padding DistributedSampler (``idist.auto_dataloader``) and wraps models in DDP
(``idist.auto_model``, SyncBatchNorm only with ``sync_bn=True``).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from paratrain.diagnostics.call_names import keyword, last_name
from paratrain.diagnostics.tree_walk import walk

if TYPE_CHECKING:
    from paratrain.diagnostics.script_facts import ScriptFacts


# accelerate.logging's adapter (and `get_logger`, which returns one): a record is written where
# `main_process_only` (default True) allows, i.e. on the main process, unless a call passes False.
_MAIN_PROCESS_LOGGERS = ("MultiProcessAdapter", "get_logger")
_ACCELERATE_LOGGING = ("accelerate.logging", "accelerate")


def accelerate_logging_names(tree: ast.Module) -> set[str]:
    """The names a module binds to accelerate's main-process logger makers (``from accelerate.logging import
    MultiProcessAdapter``, ``get_logger``), and ``accelerate.logging`` modules imported whole
    (``import accelerate.logging as alog`` → ``alog``)."""
    names = set()
    for node in walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in _ACCELERATE_LOGGING:
            names |= {alias.asname or alias.name for alias in node.names if alias.name in _MAIN_PROCESS_LOGGERS}
        elif isinstance(node, ast.Import):
            names |= {alias.asname or alias.name for alias in node.names if alias.name == "accelerate.logging"}
    return names


def returns_main_process_logger(tree: ast.Module, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``function`` (of the module ``tree``) may return accelerate's ``MultiProcessAdapter`` (or what
    ``accelerate.logging.get_logger`` makes), directly or through a name it bound one to.

    Invariant: a logger that such a helper may return logs on the main process only; which branch returns it
    (``if use_accelerate: return MultiProcessAdapter(logger, {})``) is not followed, so the helper's logger
    is never read as one that writes on every rank.
    """
    makers = accelerate_logging_names(tree)
    if not makers:
        return False
    bound = {target.id: node.value for node in walk(function) if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name)}
    for ret in (node for node in walk(function) if isinstance(node, ast.Return) and node.value is not None):
        value = bound.get(ret.value.id, ret.value) if isinstance(ret.value, ast.Name) else ret.value
        if isinstance(value, ast.Call) and (ast.unparse(value.func) in makers or (
                isinstance(value.func, ast.Attribute) and ast.unparse(value.func.value) in makers
                and value.func.attr in _MAIN_PROCESS_LOGGERS)):
            return True
    return False


def peft_prints(facts: ScriptFacts) -> list[ast.Call]:
    """``model.print_trainable_parameters()`` in a script that imports PEFT: PEFT's method prints with the builtin
    ``print`` in every process that calls it (no rank test of its own)."""
    if not any(module == "peft" or module.startswith("peft.") for module in facts.modules.values()):
        return []
    return [call for call in facts.calls_named("print_trainable_parameters")
            if isinstance(call.func, ast.Attribute) and not call.args and not call.keywords]


# pytorch-ignite's idist: `Parallel` (and `spawn`) start or join the processes of a run; `auto_dataloader` and
# `auto_model` shard the data and wrap the model for them.
IGNITE_DISTRIBUTED = ("Parallel", "spawn", "auto_dataloader", "auto_model")


def pretty_prints(facts: ScriptFacts) -> list[ast.Call]:
    """The standard library's pretty printer writing to stdout (``pprint(config)`` after ``from pprint import
    pprint``, ``pprint.pprint(...)``, ``pp``): a print like any other; one given a ``stream`` writes elsewhere."""
    return [call for call in facts.calls_named("pprint", "pp")
            if facts.full_name(call) in ("pprint.pprint", "pprint.pp") and keyword(call, "stream") is None]


def tqdm_writes(facts: ScriptFacts) -> list[ast.Call]:
    """``tqdm.write(msg)`` and ``bar.write(msg)`` on a name bound to a ``tqdm(...)``/``trange(...)`` bar: a print
    that writes even where that process's bar is disabled (doctr's ``pbar.write`` on every rank)."""
    bars = {name for name, values in facts.assigned.items() for value in values
            if isinstance(value, ast.Call) and facts.full_name(value).split(".")[0] == "tqdm"
            and last_name(value) in ("tqdm", "trange")}
    return [call for call in facts.calls_named("write") if isinstance(call.func, ast.Attribute)
            and (ast.unparse(call.func.value) in bars or facts.full_name(call.func.value) in ("tqdm.tqdm", "tqdm.auto.tqdm"))]


def ignite_distributed(facts: ScriptFacts, call: ast.Call) -> bool:
    """``idist.Parallel(backend=…)`` (``ignite.distributed``'s), or its ``spawn``/``auto_dataloader``/``auto_model``."""
    return facts.full_name(call).startswith("ignite.distributed.") and last_name(call) in IGNITE_DISTRIBUTED


def ignite_eval_loaders(facts: ScriptFacts, eval_name: re.Pattern[str]) -> list[tuple[str, ast.Call]]:
    """``test_loader = idist.auto_dataloader(test_dataset, …)``: ignite gives the loader a DistributedSampler
    (``drop_last`` False unless passed) when the world has several processes, which pads (or drops) samples so
    every rank gets as many. Evaluation data by its name or its dataset's; not where a sampler is passed."""
    found = []
    for call in facts.calls_named("auto_dataloader"):
        if not ignite_distributed(facts, call) or keyword(call, "sampler") is not None:
            continue
        name = facts.bound_name(call) or ""
        dataset = ast.unparse(call.args[0]) if call.args else ""
        if eval_name.search(name) or eval_name.search(dataset):
            found.append((name or dataset, call))
    return found
