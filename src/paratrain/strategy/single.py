"""One process, one device: move the model, nothing else."""

from __future__ import annotations

import torch

from paratrain.strategy.api import Strategy


class SingleDeviceStrategy(Strategy):
    name = "single"

    def setup(self, model: torch.nn.Module, *optimizers: torch.optim.Optimizer):
        model = model.to(self.runtime.device)
        return (model, *optimizers) if optimizers else model
