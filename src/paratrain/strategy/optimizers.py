"""Keep optimizers pointing at the model's parameters after a wrapper replaced them.

FSDP2's ``fully_shard`` swaps every parameter for a new sharded ``DTensor``
parameter, so an optimizer built before ``setup`` would update tensors the model
no longer uses (and train nothing). Rather than ask for a particular order, we
repoint the optimizer's param groups at the new parameters, in place: the user's
``optimizer`` object, its hyperparameters and any LR scheduler bound to it stay
valid.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from paratrain.errors import ConfigError


def parameter_names(module: torch.nn.Module) -> dict[int, str]:
    """``id(parameter) -> name`` for every parameter of ``module`` (tied ones under their first name)."""
    return {id(p): name for name, p in module.named_parameters()}


def reject_stateful(optimizers: Sequence[torch.optim.Optimizer], names_before: dict[int, str]) -> None:
    """Raises:
    ConfigError: an optimizer already has state (it stepped, or a state_dict was
        loaded) for a parameter of the model, which the wrapper is about to replace.
    """
    for optimizer in optimizers:
        if any(optimizer.state.get(p) for group in optimizer.param_groups for p in group["params"] if id(p) in names_before):
            raise ConfigError(
                f"{type(optimizer).__name__} already has state for the model's parameters, which setup() replaces; "
                "call rt.setup(model, optimizer) before stepping the optimizer or loading its state_dict"
            )


def rebind_optimizers(
    optimizers: Sequence[torch.optim.Optimizer],
    names_before: dict[int, str],
    module_after: torch.nn.Module,
) -> None:
    """Point ``optimizers`` at ``module_after``'s parameters, matched by name.

    Parameters the optimizer holds that are not in the model are left alone. Call
    :func:`reject_stateful` before replacing the parameters: state keyed by the old
    ones would be lost.
    """
    after = dict(module_after.named_parameters())
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["params"] = [after.get(names_before.get(id(p), ""), p) for p in group["params"]]
