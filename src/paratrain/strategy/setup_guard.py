"""Refuse a multi-process step on a model or optimizer that ``rt.setup`` never saw.

A 2-process DDP job whose loop calls ``rt.backward``/``rt.step`` on the original
module (or on ``model.module``) runs without a word: no gradient all-reduce, so the
ranks' weights drift apart from the first step. The guard remembers what ``setup``
returned and raises, on every rank (they all run the same code), before the first
optimizer step that would make them differ:

* ``backward``: some model that ``setup`` returned must have run forward since the
  last optimizer step (a forward pre-hook sets a flag; the step clears it);
* ``step``: the optimizer was given to ``setup`` or trains the set-up parameters;
* ``accumulate``: the model is one that ``setup`` returned.

One process has nothing to synchronise, so there the guard stays silent.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch

from paratrain import comm
from paratrain.errors import ConfigError

#: Attribute set on every parameter of a model that ``setup`` prepared.
SETUP_PARAMETER = "_paratrain_set_up"


class SetupGuard:
    """What ``setup`` returned, for one strategy."""

    def __init__(self) -> None:
        self.models: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.forward_seen = False

    def add(self, returned: torch.nn.Module, module: torch.nn.Module, optimizers: Iterable[torch.optim.Optimizer]) -> None:
        """Remember ``returned`` (what the user calls), its module's parameters and ``optimizers``."""
        self.models.add(returned)
        returned.register_forward_pre_hook(self._forward)
        for parameter in module.parameters():
            setattr(parameter, SETUP_PARAMETER, True)
        self.optimizers.update(optimizers)

    def _forward(self, module: torch.nn.Module, args: Any) -> None:
        self.forward_seen = True

    @staticmethod
    def _active() -> bool:
        return comm.is_initialized() and comm.world_size() > 1

    def check_backward(self) -> None:
        """Refuse a backward whose loss no set-up model produced (its gradients would not be synchronised).

        Raises:
        ConfigError: several processes, and no set-up model ran forward since the last step.
        """
        if self.forward_seen or not self._active():
            return
        raise ConfigError(
            f"rt.backward(): the loss does not come from a model that rt.setup() returned, so its gradients would "
            f"not be all-reduced and the {comm.world_size()} ranks would train different weights; call the model "
            "returned by model = rt.setup(model) (not the original module, not model.module)"
        )

    def check_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Refuse to step an optimizer of no set-up model (the ranks' weights would drift apart).

        Raises:
        ConfigError: several processes, and ``optimizer`` trains no parameter of a set-up model.
        """
        if optimizer in self.optimizers or not self._active():
            return
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        if parameters and all(getattr(p, SETUP_PARAMETER, False) for p in parameters):
            self.optimizers.add(optimizer)  # checked once
            return
        raise ConfigError(
            f"rt.step(): this {type(optimizer).__name__} trains parameters of a model that rt.setup() did not return, "
            f"so the {comm.world_size()} ranks would drift apart; pass it to setup — model, optimizer = "
            "rt.setup(model, optimizer) — or build it from the set-up model's parameters"
        )

    def stepped(self) -> None:
        self.forward_seen = False

    def check_model(self, model: torch.nn.Module) -> None:
        """Refuse a model ``setup`` did not return (the raw module skips the wrapper's synchronisation).

        Raises:
        ConfigError: several processes, and ``model`` is not one that ``setup`` returned.
        """
        if model in self.models or not self._active():
            return
        raise ConfigError(
            "rt.accumulate(model) needs the model that rt.setup() returned (model = rt.setup(model)), "
            "not the original module: gradient sync is controlled through the wrapper"
        )
