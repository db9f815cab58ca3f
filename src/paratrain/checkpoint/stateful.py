"""The objects a checkpoint collects, by name, and how each kind is saved.

* ``model``: an ``nn.Module`` (wrapped or not). Its state comes from
  ``torch.distributed.checkpoint.state_dict.get_model_state_dict``, which strips
  DDP / ``torch.compile`` prefixes and gives FSDP2 shards as DTensors.
* ``optimizer``: a ``torch.optim.Optimizer``, saved through
  ``get_optimizer_state_dict`` with parameter *names* (not indices) as keys, so it
  loads into another wrapping or world size. It needs the model that owns its
  parameters, found by identity among the models given.
* ``state``: anything else with ``state_dict()`` / ``load_state_dict()`` —
  LR schedulers, the precision's GradScaler, the resumable loader, user objects.
* ``per_rank``: state that differs between ranks — the strategy's own (PowerSGD's
  error feedback): every rank's is saved, and each rank restores its own.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch

from paratrain.checkpoint.layout import RESERVED_NAMES
from paratrain.errors import ConfigError

#: The name under which the strategy's own state (gradient communication) is saved.
STRATEGY_STATE = "strategy"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclasses.dataclass
class Stateful:
    """One named object of the checkpoint (for a model: the module inside any wrapper)."""

    name: str
    obj: Any
    kind: str  # "model" | "optimizer" | "state" | "per_rank"
    #: for an optimizer: the name of the model whose parameters it trains
    model: str | None = None
    #: added by paratrain itself (the precision's scaler): loaded only when saved
    optional: bool = False


def unwrap_model(model: torch.nn.Module, strategy: Any = None) -> torch.nn.Module:
    """The user's module inside ``torch.compile``, DataParallel and DDP wrappers.

    State is read and written on the inner module, so files never carry
    ``module.`` / ``_orig_mod.`` and load into any wrapping (torch's
    ``get_model_state_dict`` strips DDP's prefix but not DataParallel's).
    """
    if strategy is not None:
        model = strategy.unwrap(model)
    while True:
        inner = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
        if isinstance(inner, torch.nn.Module):
            model = inner
        elif isinstance(model, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
            model = model.module
        else:
            return model


def collect(objects: dict[str, Any], precision: Any, strategy: Any, access: Any) -> list[Stateful]:
    """Classify ``objects`` (``None`` values are skipped) and add ``precision`` when it has state.

    Models are kept unwrapped (:func:`unwrap_model`, with ``strategy``'s own unwrap first).
    ``access.parameters_of(optimizer)`` (the Checkpointer's state access) pairs each
    optimizer with its model.

    Raises:
        ConfigError: a name that cannot be a file name or is reserved, an object
            without ``state_dict``/``load_state_dict``, or an optimizer whose
            parameters belong to none of the models given.
    """
    entries: list[Stateful] = []
    for name, obj in objects.items():
        if obj is None:
            continue
        if not _NAME.match(name) or name.lower() in RESERVED_NAMES:
            raise ConfigError(
                f"Checkpointer object name {name!r} cannot be used (names become file names: letters, digits, "
                f"'_' and '-'; reserved: {', '.join(sorted(RESERVED_NAMES))}); pick another keyword"
            )
        if isinstance(obj, torch.nn.Module):
            entries.append(Stateful(name, unwrap_model(obj, strategy), "model"))
        elif isinstance(obj, torch.optim.Optimizer):
            entries.append(Stateful(name, obj, "optimizer"))
        elif callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)):
            entries.append(Stateful(name, obj, "state"))
        else:
            raise ConfigError(
                f"Checkpointer {name}={type(obj).__name__} has no state_dict()/load_state_dict(); "
                "give objects that do (model, optimizer, scheduler, loader, ...), or wrap yours in one"
            )
    if precision is not None and "precision" not in objects and precision.state_dict():
        entries.append(Stateful("precision", precision, "state", optional=True))
    if strategy is not None and STRATEGY_STATE not in objects and strategy.state_dict():
        entries.append(Stateful(STRATEGY_STATE, strategy, "per_rank", optional=True))
    _pair_optimizers(entries, access.parameters_of)
    return entries


def _pair_optimizers(entries: list[Stateful], parameters_of: Any) -> None:
    models = [e for e in entries if e.kind == "model"]
    owned = {e.name: {id(p) for p in e.obj.parameters()} for e in models}
    for entry in entries:
        if entry.kind != "optimizer":
            continue
        params = [id(p) for p in parameters_of(entry.obj)]
        owners = [name for name, ids in owned.items() if params and all(p in ids for p in params)]
        if not owners:
            given = ", ".join(owned) or "none"
            raise ConfigError(
                f"Checkpointer optimizer {entry.name!r} trains parameters of no model given to it (models: {given}); "
                "pass the model whose parameters it trains too (model=model), the one rt.setup returned"
            )
        entry.model = owners[0]


def by_name(entries: list[Stateful]) -> dict[str, Stateful]:
    return {e.name: e for e in entries}
