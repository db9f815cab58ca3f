"""A validation metric a LightningModule logs without ``sync_dist=True`` while a checkpoint callback chooses by it.

    def validation_step(self, batch, batch_idx):
        ...
        self.log("val_loss", loss)          # each process averages its own shard of the validation set
    ModelCheckpoint(monitor="val_loss")     # and the best checkpoint is chosen by rank 0's part alone

Under DDP, Lightning gives every process its own shard of the validation data. A value logged at epoch level
(``validation_step`` and ``test_step`` log at epoch level by default, as does any ``on_epoch=True``) without
``sync_dist=True`` is each process's own mean, so the callback compares one shard's loss across epochs
(Lightning warns about this at run time: "It is recommended to use ``self.log(..., sync_dist=True)`` when logging
on epoch level in distributed setting"). Reported only where the harm is shown: the logged name is one that a
``monitor=`` of the file or of the project's Python and YAML files names. A logged metric object
(``self.log("acc", self.accuracy)``, a torchmetrics ``Metric`` that syncs itself), a ``.compute()`` of one, a
``log_dict`` of a mapping that is not written out, or a hook that gathers itself (``all_gather``) is not a finding.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from paratrain.diagnostics.check_finding import Finding
from paratrain.diagnostics.script_facts import ScriptFacts, keyword, last_name
from paratrain.diagnostics.project_imports import read_small_file
from paratrain.diagnostics.project_mentions import marked_root, project_files

# Hooks whose `self.log` is epoch-level unless the call says otherwise.
_EPOCH_HOOKS = {"validation_step", "test_step", "validation_epoch_end", "test_epoch_end", "on_validation_epoch_end",
                "on_test_epoch_end"}
_GATHERS = {"all_gather", "all_reduce", "gather", "reduce", "gather_all_tensors", "sync"}


def unsynced_monitored_log(facts: ScriptFacts) -> Iterator[Finding]:
    """One finding at the first epoch-level ``self.log`` without ``sync_dist`` whose name a ``monitor=`` names,
    the file's other such logs named beside it."""
    if not facts.mentions(r"self\.log") or not facts.distributed:
        return
    logs = [call for call in facts.calls_named("log", "log_dict") if _unsynced_epoch_log(facts, call)]
    if not logs:
        return
    monitored = _monitored_names(facts)
    first = next((call for call in logs if _logged_names(call) & monitored), None)
    if first is None:
        return
    name = sorted(_logged_names(first) & monitored)[0]
    others = sorted({call.lineno for call in logs} - {first.lineno})
    also = f"; the file's other values logged so are each process's own too (also lines {', '.join(map(str, others))})"
    yield Finding(
        first.lineno, "ungathered-metric",
        f"`{name}` is logged at epoch level without sync_dist=True, so under DDP each process logs the mean of its "
        f"own shard of the data, and the checkpoint callback that monitors `{name}` chooses by one shard's value"
        + (also if others else ""),
        f'self.log("{name}", value, sync_dist=True) (or log a torchmetrics Metric, which gathers itself)',
    )


def _unsynced_epoch_log(facts: ScriptFacts, call: ast.Call) -> bool:
    """``self.log(...)``/``self.log_dict(...)`` at epoch level in a method of a class, without ``sync_dist``
    (or with it false), of a plain value."""
    if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id == "self"):
        return False
    method = facts.scope(call)
    if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    sync = keyword(call, "sync_dist")
    if sync is not None and not (isinstance(sync, ast.Constant) and not sync.value):
        return False
    on_epoch = keyword(call, "on_epoch")
    if on_epoch is not None:
        if not (isinstance(on_epoch, ast.Constant) and on_epoch.value is True):
            return False
    elif method.name not in _EPOCH_HOOKS:
        return False
    if any(last_name(inner) in _GATHERS or "gather" in last_name(inner) for inner in ast.walk(method)
           if isinstance(inner, ast.Call)):
        return False  # the hook gathers (or reduces) what it logs itself (ngp_pl's all_gather_ddp_if_available too)
    value = call.args[1] if len(call.args) > 1 else keyword(call, "value")
    if last_name(call) == "log_dict":
        value = call.args[0] if call.args else keyword(call, "dictionary")
        return isinstance(value, ast.Dict) and all(_plain_value(v) for v in value.values)
    return value is not None and _plain_value(value)


def _plain_value(value: ast.expr) -> bool:
    """A tensor or number, not a metric object (``self.acc``) nor its ``.compute()``."""
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
        return False
    return not any(isinstance(node, ast.Call) and last_name(node) == "compute" for node in ast.walk(value))


def _logged_names(call: ast.Call) -> set[str]:
    """The literal names ``call`` logs (its first argument, or a written-out mapping's keys)."""
    first = call.args[0] if call.args else keyword(call, "name") or keyword(call, "dictionary")
    keys = first.keys if isinstance(first, ast.Dict) else [first]
    return {key.value for key in keys if isinstance(key, ast.Constant) and isinstance(key.value, str)}


def _monitored_names(facts: ScriptFacts) -> set[str]:
    """The names a ``monitor=`` of the file, or of its project's Python and YAML files, gives as a literal."""
    names = {value.value for call in facts.calls if isinstance(value := keyword(call, "monitor"), ast.Constant)
             and isinstance(value.value, str)}
    root = marked_root(facts.script.resolve()) if facts.script is not None else None
    if root is not None:
        for path in project_files(root, (".py", ".yaml", ".yml")):
            text = read_small_file(path) or b""
            if b"monitor" in text:
                names.update(name.decode(errors="replace")
                             for name in re.findall(rb"\bmonitor[\"']?\s*[=:]\s*[\"']?([\w/.\-]+)", text))
    return names

