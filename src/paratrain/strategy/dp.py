"""``torch.nn.DataParallel``: one process driving every visible GPU (kept for comparison).

DataParallel replicates the model onto each GPU on every forward and gathers the
outputs on the first one; torch recommends DDP instead (one process per GPU, no
per-step replication, no GIL contention). On a machine without CUDA it runs the
module unchanged, which is what the CPU tests compare against ``single``.
"""

from __future__ import annotations

import torch

from paratrain.errors import ConfigError
from paratrain.strategy import register_strategy
from paratrain.strategy.api import Strategy


@register_strategy
class DataParallelStrategy(Strategy):
    name = "dp"
    moves_inputs = True  # DataParallel scatters CPU inputs over the GPUs

    @classmethod
    def check(cls, world_size, options, sync_batchnorm=False, compile=False) -> None:
        """Whether this job can run DataParallel: one process (no process group needed).

        Raises:
        ConfigError: more than one process (DataParallel already uses every GPU from one).
        """
        if world_size > 1:
            raise ConfigError(
                f"strategy 'dp' runs one process over all GPUs, but this job has {world_size} processes; "
                "use strategy='ddp' (one process per GPU) or launch a single process"
            )

    def wrap(self, module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> torch.nn.Module:
        # device_ids=None: every visible GPU; outputs gathered on the module's device (cuda:0).
        return torch.nn.DataParallel(module)

    def unwrap_wrapper(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if isinstance(model, torch.nn.DataParallel) else model
