"""DistributedDataParallel: a full replica per process, gradients all-reduced in buckets.

DDP's constructor broadcasts rank 0's parameters and buffers, so every rank starts
from the same weights whatever each one's seed was. Options pass straight through
to ``torch.nn.parallel.DistributedDataParallel``.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.parallel import DistributedDataParallel

from paratrain import comm
from paratrain.errors import ConfigError, DistributedError
from paratrain.strategy.api import Strategy
from paratrain.strategy.unused_parameters import unused_parameters_message


class AdvisingDistributedDataParallel(DistributedDataParallel):
    """DDP whose unfinished-reduction error names the parameters that got no gradient."""

    def forward(self, *args, **kwargs):
        try:
            return super().forward(*args, **kwargs)
        except RuntimeError as exc:
            message = unused_parameters_message(self.module, exc)
            if message is None:
                raise
            raise DistributedError(message) from exc


class DDPStrategy(Strategy):
    """Options: ``find_unused_parameters``, ``static_graph``, ``bucket_cap_mb``,
    ``gradient_as_bucket_view``, ``broadcast_buffers`` (see torch's DDP)."""

    name = "ddp"
    option_names = (
        "find_unused_parameters",
        "static_graph",
        "bucket_cap_mb",
        "gradient_as_bucket_view",
        "broadcast_buffers",
    )

    def wrap(self, module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> torch.nn.Module:
        if not comm.is_initialized():
            # One process without a process group: nothing to synchronise, and DDP needs a group.
            comm.get_logger().info("strategy 'ddp' with one process: running the model unwrapped")
            return module
        if not any(p.requires_grad for p in module.parameters()):
            raise ConfigError("strategy 'ddp' needs a model with trainable parameters; this one has none")
        kwargs = dict(self.options)
        if self.device.type == "cuda":
            kwargs.update(device_ids=[self.device.index], output_device=self.device.index)
        return AdvisingDistributedDataParallel(module, **kwargs)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        ddp = getattr(model, "_orig_mod", model)
        if isinstance(ddp, DistributedDataParallel):
            return ddp.no_sync()
        if comm.is_initialized():
            raise ConfigError("accumulate(model) needs the model returned by rt.setup(model), not the original module")
        return contextlib.nullcontext()

    def unwrap_wrapper(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model
