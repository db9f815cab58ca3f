"""One process, one device: move the model, nothing else.

Also usable when ranks train independent models on purpose: ``setup`` only waits
for all ranks, and no weights are exchanged, so each rank keeps its own.
"""

from __future__ import annotations

import torch

from paratrain.strategy import register_strategy
from paratrain.strategy.api import Strategy


@register_strategy
class SingleDeviceStrategy(Strategy):
    name = "single"

    def wrap(self, module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> torch.nn.Module:
        return module

    def check_same_weights(self, model: torch.nn.Module, step: int | None = None) -> None:
        """Nothing to compare: each process trains its own model."""
