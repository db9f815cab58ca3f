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
    """Refuse optimizers whose state a wrapper would orphan by replacing the parameters it belongs to.

    Raises:
    ConfigError: an optimizer already has state (it stepped, or a state_dict was
        loaded) for a parameter of the model, which the wrapper is about to replace.
    """
    for optimizer in optimizers:
        if any(optimizer.state.get(p) for group in optimizer.param_groups for p in group["params"] if id(p) in names_before):
            raise ConfigError(
                f"{type(optimizer).__name__} already has state for the model's parameters, which setup() replaces; "
                "call rt.setup(model, optimizer) before stepping the optimizer or loading its state_dict"
            )


#: Attribute set on a parameter that a wrapper replaced (its value: the parameter's name).
REPLACED_MARK = "_paratrain_replaced"


def mark_replaced(module_before: dict[int, str], parameters: Sequence[torch.nn.Parameter]) -> None:
    """Mark ``parameters`` (the ones a wrapper just replaced) so an optimizer still holding them is refused."""
    for parameter in parameters:
        setattr(parameter, REPLACED_MARK, module_before.get(id(parameter), "?"))


def check_trains_current_parameters(optimizer: torch.optim.Optimizer) -> None:
    """Refuse to step an optimizer that still holds the parameters ``setup`` replaced.

    Raises:
    ConfigError: ``optimizer`` holds parameters that ``setup`` replaced (FSDP shards
        them) and was not given to ``setup``: stepping it would change tensors the
        model no longer uses, so the weights would never change.
    """
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            name = getattr(parameter, REPLACED_MARK, None)
            if name is not None:
                raise ConfigError(
                    f"{type(optimizer).__name__} holds the parameters the model had before rt.setup() replaced them "
                    f"({name!r}, …), so it would train nothing; pass it to setup — model, optimizer = "
                    "rt.setup(model, optimizer) — or build it after setup from model.parameters()"
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
