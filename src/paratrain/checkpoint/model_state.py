"""Model and optimizer state through ``torch.distributed.checkpoint.state_dict``.

``get_model_state_dict`` / ``get_optimizer_state_dict`` work for any wrapper — plain,
DataParallel, DDP, ``torch.compile``, FSDP2 — giving the user's parameter names
and, for FSDP2, DTensor shards. Optimizer state is keyed by parameter *name*, so
it loads into another wrapper or another world size.
"""

from __future__ import annotations

from typing import Any

import torch

from paratrain.errors import CheckpointError


def _dsd() -> Any:
    # Imported on first use: torch.distributed.checkpoint takes about a second to import,
    # and `import paratrain` should not pay for it.
    import torch.distributed.checkpoint.state_dict as dsd

    return dsd


def model_state(model: torch.nn.Module, sharded: bool) -> dict[str, Any]:
    """The model's state: CPU tensors, or (``sharded``) this rank's DTensor shards in place."""
    dsd = _dsd()
    return dsd.get_model_state_dict(model, options=dsd.StateDictOptions(cpu_offload=not sharded))


def model_layout(model: torch.nn.Module) -> dict[str, Any]:
    """The model's state in its own layout (no copies; DTensors for fsdp): a DCP load target."""
    return _dsd().get_model_state_dict(model)


def optimizer_layout(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state in its own layout, as a DCP load target. A fresh optimizer
    first gets its state created by a zero-lr step (``_init_optim_state``); the load
    then overwrites all of it."""
    return _dsd().get_optimizer_state_dict(model, optimizer)


def optimizer_is_fresh(optimizer: torch.optim.Optimizer) -> bool:
    """True before the first ``step()``: there is no per-parameter state yet."""
    return not optimizer.state


def fresh_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Hyperparameters only. ``get_optimizer_state_dict`` would first run a zero-gradient
    ``step()`` to create the state (``_init_optim_state``), which changes Adam's step
    count, so saving before the first step would change the training that follows."""
    return {"state": {}, "param_groups": [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]}


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> dict[str, Any]:
    """Name-keyed optimizer state (CPU, or this rank's shards when ``sharded``)."""
    if optimizer_is_fresh(optimizer):
        return fresh_optimizer_state(optimizer)
    dsd = _dsd()
    return dsd.get_optimizer_state_dict(model, optimizer, options=dsd.StateDictOptions(cpu_offload=not sharded))


def load_model(model: torch.nn.Module, state: dict[str, Any], full: bool) -> None:
    """Load ``state`` (checked to fit beforehand) into ``model``.

    ``full``: ``state`` holds whole tensors (a one-file checkpoint); for an FSDP2
    model each rank then keeps its own slice. Otherwise ``state`` has the model's own
    layout (what :func:`model_state` returned, filled by a DCP load).
    """
    dsd = _dsd()
    dsd.set_model_state_dict(model, state, options=dsd.StateDictOptions(full_state_dict=full))


def load_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any], full: bool) -> None:
    """Load name-keyed optimizer ``state`` into ``optimizer`` (of ``model``).

    Raises:
        CheckpointError: the saved optimizer has another number of parameter groups.
    """
    if not state.get("state"):
        saved_groups = state.get("param_groups", [])
        if len(saved_groups) != len(optimizer.param_groups):
            raise CheckpointError(
                f"the saved optimizer has {len(saved_groups)} parameter group(s), this one "
                f"{len(optimizer.param_groups)}; build the optimizer as in the saved run"
            )
        optimizer.state.clear()  # saved before its first step: no per-parameter state
        for group, saved in zip(optimizer.param_groups, saved_groups):
            group.update({k: v for k, v in saved.items() if k != "params"})
        return
    dsd = _dsd()
    dsd.set_optimizer_state_dict(model, optimizer, state, options=dsd.StateDictOptions(full_state_dict=full))


class TorchStateAccess:
    """Whole-tensor model and optimizer state for every torch wrapper (plain, DataParallel,
    DDP, ``torch.compile``, FSDP2 gathered). A strategy whose state lives elsewhere
    (DeepSpeed's ZeRO partitions) gives the Checkpointer its own object with these
    methods through ``Strategy.state_access()``."""

    def parameters_of(self, optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
        return [p for group in optimizer.param_groups for p in group["params"]]

    def model_layout(self, module: torch.nn.Module) -> dict[str, Any]:
        return model_layout(module)

    def model_state(self, module: torch.nn.Module) -> dict[str, Any]:
        return model_state(module, sharded=False)

    def load_model(self, module: torch.nn.Module, state: dict[str, Any], full: bool = True) -> None:
        load_model(module, state, full)

    def optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return optimizer_state(module, optimizer, sharded=False)

    def load_optimizer(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                       state: dict[str, Any], full: bool = True) -> None:
        load_optimizer(module, optimizer, state, full)
