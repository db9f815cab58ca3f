"""Fault tolerance per step with the model sharded inside each replica group: torchft's HSDP layout.

``strategy="ft-fsdp"`` is ``ft-ddp`` (:mod:`paratrain.strategy.ft_ddp`: the quorum, the committed data
cursor, the commit vote, healing, the bounds) whose processes each hold ``1/K`` of the model: FSDP2
(``fully_shard``) over the group's ``K`` processes, the replicated dimension running across groups.
torchft's own FSDP test (``torchft/fsdp_test.py``) composes them this way: after FSDP2 reduce-scatters
a gradient inside the group (its mean over the ``K`` processes), its all-reduce hook
(``set_all_reduce_hook``) averages this rank's shard over its *ring* — rank ``i`` of every group of the
quorum, which holds the same shard — through the Manager, so a peer that dies there fails the step's
vote instead of raising. Nothing reduce-scatters across groups (torchft 0.2.0's ``ProcessGroupGloo``, the
ring on CPU, has no reduce-scatter; its NCCL one has): inside the group FSDP2 uses the job's own process
group (gloo on CPU, NCCL on CUDA), across groups only all-reduces run.

A joining group's rank ``i`` heals from rank ``i`` of a live group: it receives the *local shards* of the
weights and of the optimizer state (the same layout: every group has ``K`` processes), not whole tensors.
"""

from __future__ import annotations

from typing import Any

import torch

from paratrain.errors import ConfigError
from paratrain.strategy import register_strategy
from paratrain.strategy.ft_ddp import FTDDPStrategy
from paratrain.strategy.ft_gradients import across_groups
from paratrain.strategy.optimizers import mark_replaced, parameter_names, rebind_optimizers, reject_stateful
from paratrain.strategy.weights import broadcast_module


@register_strategy
class FTFSDPStrategy(FTDDPStrategy):
    """Per-step fault tolerance over replica groups, each sharding the model with FSDP2 over its processes
    (``pt.Runtime(strategy="ft-fsdp")``), with ft-ddp's options. The whole model is sharded as one unit."""

    name = "ft-fsdp"
    sharded_state = True
    moves_inputs = True  # FSDP2's root module moves the inputs to its device

    def wrap(self, module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> torch.nn.Module:
        """Shard ``module`` over the group (collective over the group) and hook each reduce-scattered gradient
        shard to its ring; register the local shards of the weights and optimizers for healing.

        Raises:
            ConfigError: a model without trainable parameters, or an optimizer that already holds state.
        """
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        if not any(p.requires_grad for p in module.parameters()):
            raise ConfigError("strategy 'ft-fsdp' needs a model with trainable parameters; this one has none")
        names_before, parameters_before = parameter_names(module), list(module.parameters())
        reject_stateful(optimizers, names_before)
        broadcast_module(module)  # fully_shard keeps each rank's slice of its own tensors: they must agree first
        fully_shard(module, mesh=init_device_mesh(self.device.type, (self.group_size,)),
                    mp_policy=self.precision.fsdp_policy())
        rebind_optimizers(optimizers, names_before, module)
        mark_replaced(names_before, parameters_before)
        manager = self.manager
        module.set_all_reduce_hook(lambda shard: across_groups(manager, shard))
        self.heal_with("model", LocalShards(module))
        for index, optimizer in enumerate(optimizers):
            self.heal_with(f"optimizer{index}", LocalShards(optimizer))
        self.heal_with("precision", self.precision)
        return module

    def unwrap_wrapper(self, model: torch.nn.Module) -> torch.nn.Module:
        return model


class LocalShards:
    """What a healing rank receives of ``stateful`` (a sharded module or its optimizer): its ``state_dict()``
    with every DTensor replaced by this rank's local shard, and loaded back into the DTensors' layout — the
    sender's rank ``i`` holds the same shard as the receiver's rank ``i``."""

    def __init__(self, stateful: Any):
        self.stateful = stateful

    def state_dict(self) -> dict[str, Any]:
        return _map_tensors(self.stateful.state_dict(), _local)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if isinstance(self.stateful, torch.optim.Optimizer):
            self.stateful.load_state_dict(_as_parameters(self.stateful, state))
            return
        own = self.stateful.state_dict()
        with torch.no_grad():
            for name, tensor in own.items():
                _local(tensor).copy_(state[name])


def _local(value: Any) -> Any:
    return value.to_local() if hasattr(value, "to_local") else value


def _map_tensors(value: Any, fn) -> Any:
    if isinstance(value, dict):
        return {key: _map_tensors(item, fn) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(item, fn) for item in value)
    return fn(value) if isinstance(value, torch.Tensor) else value


def _as_parameters(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (an optimizer state dict of local shards) with each per-parameter tensor shaped like its
    parameter's shard made a DTensor of that parameter's layout again (a step count stays as it is)."""
    from torch.distributed.tensor import DTensor

    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    by_index = dict(enumerate(parameters))
    converted = {}
    for index, entries in state["state"].items():
        parameter = by_index[int(index)]
        converted[index] = {
            key: DTensor.from_local(value, parameter.device_mesh, parameter.placements, shape=parameter.shape,
                                    stride=parameter.stride())
            if isinstance(parameter, DTensor) and isinstance(value, torch.Tensor)
            and value.shape == parameter.to_local().shape else value
            for key, value in entries.items()}
    return {**state, "state": converted}
