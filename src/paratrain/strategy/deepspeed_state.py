"""Checkpoint state of a DeepSpeed ZeRO engine, as whole tensors keyed by parameter name.

ZeRO keeps the fp32 master weights and the optimizer state in flat per-rank
partitions (stage 3 partitions the module's parameters too), so neither
``module.state_dict()`` nor the user's optimizer describe the training state.
DeepSpeed's tensor-fragment API (``deepspeed.utils.safe_get_full_fp32_param``,
``safe_get_full_optimizer_state`` and their ``safe_set_full_*`` twins) gathers and
scatters one parameter at a time; with it the checkpoint has the same layout as a
ddp one — the model's weights by name, the optimizer state by parameter name —
so it loads at any world size, at any ZeRO stage, and into ``ddp``/``single``.

Every function here is collective: all ranks call it together, in the same order.
"""

from __future__ import annotations

from typing import Any

import torch

#: The engine's counters and dynamic loss scale (fp16) kept beside the optimizer state.
_LOSS_SCALER_FIELDS = ("cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis")
_ENGINE_COUNTERS = ("global_steps", "global_samples", "skipped_steps")


class ZeroStateAccess:
    """Reads and writes the whole-tensor state of ``engine`` (a ``DeepSpeedEngine``).

    ``group_names``: the module's parameter names in each param group of the user's
    optimizer, recorded before ``deepspeed.initialize`` re-pointed the groups to partitions.
    """

    #: reads gather partitions: every rank must take part, not just the writer
    collective = True

    def __init__(self, engine: Any, group_names: list[list[str]]):
        import deepspeed  # present: the strategy that made the engine required it

        self.deepspeed = deepspeed
        self.engine = engine
        self.module: torch.nn.Module = engine.module
        self.zero_optimizer = engine.optimizer  # wraps the user's optimizer (its "base optimizer")
        self.group_names = group_names

    # ---- which parameters an optimizer trains --------------------------------------------
    def parameters_of(self, optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
        """The module parameters behind ``optimizer`` (ZeRO re-points it to flat partitions)."""
        if optimizer is getattr(self.zero_optimizer, "optimizer", None):
            return [p for p in self.module.parameters() if p.requires_grad]
        return [p for group in optimizer.param_groups for p in group["params"]]

    # ---- model -----------------------------------------------------------------------------
    def model_layout(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Meta tensors with the full shapes (stage 3 parameters are empty locally)."""
        return {name: torch.empty(_full_shape(t), dtype=t.dtype, device="meta") for name, t in _state_tensors(module)}

    def model_state(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Full weights on CPU: the fp32 master copy of every trained parameter, buffers as they are."""
        state = {}
        for name, tensor in _state_tensors(module):
            master = self.deepspeed.utils.safe_get_full_fp32_param(tensor) if _trained(tensor) else None
            if master is None:
                master = self._gathered(tensor)
            state[name] = master.detach().reshape(_full_shape(tensor)).cpu().clone()
        return state

    def load_model(self, module: torch.nn.Module, state: dict[str, torch.Tensor], full: bool = True) -> None:
        """Copy whole tensors into the module's (possibly partitioned) weights and the fp32 masters."""
        tensors = dict(_state_tensors(module))
        params = [t for t in tensors.values() if isinstance(t, torch.nn.Parameter)]
        # GatheredParameters is a no-op below stage 3; at stage 3 rank 0's edits are re-partitioned.
        with self.deepspeed.zero.GatheredParameters(params, modifier_rank=0):
            with torch.no_grad():
                for name, tensor in tensors.items():
                    tensor.copy_(state[name].reshape(tensor.shape).to(tensor.device, tensor.dtype))
        for name, tensor in tensors.items():
            if _trained(tensor):
                value = state[name].to(self.engine.device, torch.float32)
                self._set_full(tensor, value, None)

    def _set_full(self, param: torch.nn.Parameter, value: torch.Tensor, key: str | None) -> None:
        """Scatter a whole fp32 tensor (the master weight, or optimizer state ``key``) to its partitions."""
        if not hasattr(param, "ds_id"):
            if key is None:
                self.deepspeed.utils.safe_set_full_fp32_param(param, value)
            else:
                self.deepspeed.utils.safe_set_full_optimizer_state(param, value, key)
            return
        # Stage 3. DeepSpeed's set_full_hp_param cuts this rank's slice out of the unpadded
        # value and fails on the last rank when numel is not a multiple of the world size
        # (a 3-element bias on 2 ranks); the same cut from a zero-padded copy.
        zero3 = param._z3_optimizer
        partition, _ = zero3._get_fp32_opt_state_partition(param, release_swap_buffers=False, optim_state_key=key)
        rank = zero3._get_param_partition_rank(param)
        padded = value.new_zeros(max(partition.numel() * (rank + 1), value.numel()))
        padded[: value.numel()] = value.flatten()
        partition.data.copy_(padded.narrow(0, partition.numel() * rank, partition.numel()))

    def _gathered(self, tensor: torch.Tensor) -> torch.Tensor:
        if not hasattr(tensor, "ds_id"):
            return tensor
        with self.deepspeed.zero.GatheredParameters([tensor]):
            return tensor.detach().clone()

    # ---- optimizer ---------------------------------------------------------------------------
    def optimizer_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """``{"state": {param name: {key: whole tensor}}, "param_groups": [...], "deepspeed": {...}}``."""
        tensor_keys, scalars = self._state_keys(optimizer)
        state = {}
        for name, param in _trained_parameters(module):
            entry = {key: self._full_optimizer_state(param, key) for key in tensor_keys}
            entry.update({key: values[0].clone() for key, values in scalars.items()})
            state[name] = entry
        groups = [{**_hyperparameters(group), "params": names}
                  for group, names in zip(optimizer.param_groups, self.group_names)]
        return {"state": state, "param_groups": groups, "deepspeed": self._engine_state()}

    def load_optimizer(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                       saved: dict[str, Any], full: bool = True) -> None:
        """Scatter saved whole-tensor optimizer state into this rank's partitions.

        Raises:
            ValueError: the saved state lacks a parameter, or has another number of groups.
        """
        if len(saved["param_groups"]) != len(optimizer.param_groups):
            raise ValueError(
                f"the saved optimizer has {len(saved['param_groups'])} parameter group(s), this one "
                f"{len(optimizer.param_groups)}; build the optimizer as in the saved run"
            )
        self._create_optimizer_state(optimizer)
        for group, saved_group in zip(optimizer.param_groups, saved["param_groups"]):
            group.update({k: v for k, v in saved_group.items() if k != "params"})
        tensor_keys, scalars = self._state_keys(optimizer)
        for name, param in _trained_parameters(module):
            if name not in saved["state"]:
                raise ValueError(f"the saved optimizer has no state for parameter {name!r}")
            entry = saved["state"][name]
            for key in tensor_keys:
                value = entry[key].to(self.engine.device, torch.float32)
                self._set_full(param, value, key)
            for key, values in scalars.items():
                for current in values:  # one per flat partition; equal across parameters
                    current.copy_(entry[key])
        self._load_engine_state(saved.get("deepspeed", {}))

    def _create_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        """Give a fresh engine's optimizer the state tensors that a load overwrites.

        The torch optimizer creates its state at its first ``step()``, and ZeRO 1/2 map
        each parameter onto its slice of that state only then: before it there is
        nothing to load into. One step with zero gradients and a zero learning rate over
        this rank's flat partitions creates the state without moving the weights (its
        counters are overwritten by the load); then the engine's own linking runs.
        """
        partitions = self._flat_partitions(optimizer)
        if all(optimizer.state.get(flat) for _, flat in partitions):
            return
        kept = [(group["params"], group["lr"]) for group in optimizer.param_groups]
        for index, group in enumerate(optimizer.param_groups):
            group["params"] = [flat for owner, flat in partitions if owner == index]
            group["lr"] = 0.0
        for _, flat in partitions:
            flat.grad = torch.zeros_like(flat)
        try:
            optimizer.step()
        finally:
            for group, (params, rate) in zip(optimizer.param_groups, kept):
                group["params"], group["lr"] = params, rate
            for _, flat in partitions:
                flat.grad = None
        link = getattr(self.zero_optimizer, "_lazy_init_hp_params_optimizer_state", None)
        if link is not None:  # ZeRO 1/2 (stage 3 looks its state up at each access)
            link()

    def _flat_partitions(self, optimizer: torch.optim.Optimizer) -> list[tuple[int, torch.Tensor]]:
        """(parameter group index, flat fp32 partition of this rank) for everything the optimizer steps.

        Stage 3 keeps its partitions in sub-groups and puts each into the optimizer's
        param groups only while stepping it; ZeRO 1/2 leave them there.
        """
        zero = self.zero_optimizer
        if hasattr(zero, "fp32_partitioned_groups_flat"):
            return [(zero.sub_group_to_group_id[i], flat) for i, flat in enumerate(zero.fp32_partitioned_groups_flat)]
        return [(index, flat) for index, group in enumerate(optimizer.param_groups) for flat in group["params"]]

    def _state_keys(self, optimizer: torch.optim.Optimizer) -> tuple[list[str], dict[str, list[torch.Tensor]]]:
        """Per-element state keys (``exp_avg``, ``momentum_buffer``) and the scalar states
        (``step``) of every flat partition on this rank, by key."""
        tensor_keys: list[str] = []
        scalars: dict[str, list[torch.Tensor]] = {}
        for flat, entry in optimizer.state.items():
            for key, value in entry.items():
                if torch.is_tensor(value) and value.shape == flat.shape and value.dim() > 0:
                    if key not in tensor_keys:
                        tensor_keys.append(key)
                elif torch.is_tensor(value):
                    scalars.setdefault(key, []).append(value)
        return tensor_keys, scalars

    def _full_optimizer_state(self, param: torch.nn.Parameter, key: str) -> torch.Tensor:
        value = self.deepspeed.utils.safe_get_full_optimizer_state(param, key)
        return value.detach().reshape(_full_shape(param)).cpu().clone()

    def _engine_state(self) -> dict[str, Any]:
        state = {name: int(getattr(self.engine, name, 0) or 0) for name in _ENGINE_COUNTERS}
        scaler = getattr(self.zero_optimizer, "loss_scaler", None)
        for field in _LOSS_SCALER_FIELDS:
            if hasattr(scaler, field):
                state[f"loss_scaler.{field}"] = float(getattr(scaler, field))
        return state

    def _load_engine_state(self, state: dict[str, Any]) -> None:
        for name in _ENGINE_COUNTERS:
            if name in state:
                setattr(self.engine, name, int(state[name]))
        scaler = getattr(self.zero_optimizer, "loss_scaler", None)
        for field in _LOSS_SCALER_FIELDS:
            key = f"loss_scaler.{field}"
            if key in state and hasattr(scaler, field):
                current = getattr(scaler, field)
                setattr(scaler, field, type(current)(state[key]))


def _state_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The tensors ``module.state_dict()`` names (persistent buffers included), as live objects."""
    keys = set(module.state_dict(keep_vars=True))
    named = [*module.named_parameters(), *module.named_buffers()]
    return [(name, tensor) for name, tensor in named if name in keys]


def _trained_parameters(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def _trained(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, torch.nn.Parameter) and tensor.requires_grad


def _full_shape(tensor: torch.Tensor) -> tuple[int, ...]:
    """A stage 3 parameter's real shape (its local tensor is an empty placeholder)."""
    return tuple(getattr(tensor, "ds_shape", tensor.shape))


def _hyperparameters(group: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in group.items() if k != "params"}
