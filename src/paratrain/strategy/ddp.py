"""DistributedDataParallel: a full replica per process, gradients all-reduced in buckets.

DDP's constructor broadcasts rank 0's parameters and buffers, so every rank starts
from the same weights whatever each one's seed was. Options pass straight through
to ``torch.nn.parallel.DistributedDataParallel``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from paratrain import comm
from paratrain.arguments import option_field
from paratrain.errors import ConfigError, DistributedError
from paratrain.strategy import register_strategy
from paratrain.strategy.api import Strategy, StrategyOptions
from paratrain.strategy.grad_compression import parse_compression
from paratrain.strategy.gradient_comm import GradientCommunication
from paratrain.strategy.unused_parameters import unused_parameters_message


#: The options that go to torch's ``DistributedDataParallel`` as they are.
_TORCH_ARGUMENTS = ("find_unused_parameters", "static_graph", "bucket_cap_mb", "broadcast_buffers")


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


@register_strategy
class DDPStrategy(Strategy):
    """DistributedDataParallel with :class:`DDPStrategy.Options` (``pt.DDP(find_unused_parameters=True)``).

    ``gradient_as_bucket_view=True`` makes each ``.grad`` a view into DDP's all-reduce
    bucket instead of a separate copy: one gradient-sized buffer less and no copy back
    after every all-reduce. Everything paratrain does to gradients (averaging accumulated
    micro-batches, clipping, fp16 unscaling) works in place, which is what the view
    needs; ``zero_grad(set_to_none=True)`` only drops the view, DDP re-attaches it.
    """

    name = "ddp"

    @dataclass(frozen=True)
    class Options(StrategyOptions):
        """All but ``grad_compression`` go to torch's ``DistributedDataParallel`` as they are."""

        find_unused_parameters: bool = option_field(
            False, "allow parameters that get no gradient in a step (slower: DDP searches the autograd graph "
            "every step)")
        static_graph: bool = option_field(False, "the same parameters are used in every step (torch's "
                                          "static_graph)")
        bucket_cap_mb: float | None = option_field(
            None, "size of DDP's all-reduce buckets in MiB (default: torch's, or what grad-compression picks)",
            metavar="MB")
        gradient_as_bucket_view: bool = option_field(True, "each .grad is a view into its all-reduce bucket (one "
                                                     "gradient-sized copy less)")
        broadcast_buffers: bool = option_field(True, "broadcast rank 0's buffers before every forward")
        grad_compression: str = option_field(
            "none", "gradients over the network: none, bf16, fp16, powersgd[:RANK] or auto (picks from the link "
            "measured at start; one node keeps none)", metavar="KIND")

        def __post_init__(self) -> None:
            """Check each value against its annotation, and ``grad_compression``'s form.

            Raises:
            ConfigError: a value of the wrong type; a ``grad_compression`` that is not one of its forms.
            """
            super().__post_init__()
            parse_compression(self.grad_compression)

    @property
    def moves_inputs(self) -> bool:
        # With device_ids (every CUDA rank), torch's DDP moves the forward's inputs to its device:
        # a model(**batch) whose labels travel with the inputs works from CPU batches, as under torch.
        return self.device.type == "cuda"

    def connect(self, process, device, precision, sync_batchnorm=False, compile=False) -> DDPStrategy:
        super().connect(process, device, precision, sync_batchnorm, compile)
        self.gradient_comm = GradientCommunication(
            self.options.grad_compression,
            num_nodes=process.num_nodes,  # agreed at start-up (runtime/topology.py)
        )
        return self

    def wrap(self, module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> torch.nn.Module:
        if not comm.is_initialized():
            # One process without a process group: nothing to synchronise, and DDP needs a group.
            comm.get_logger().info("strategy 'ddp' with one process: running the model unwrapped")
            return module
        if not any(p.requires_grad for p in module.parameters()):
            raise ConfigError("strategy 'ddp' needs a model with trainable parameters; this one has none")
        # What differs from torch's defaults (the Options' defaults are torch's, but for the bucket
        # view): torch warns about some arguments merely given (broadcast_buffers in 2.13).
        kwargs = {"gradient_as_bucket_view": self.options.gradient_as_bucket_view}
        kwargs.update((field.name, getattr(self.options, field.name)) for field in dataclasses.fields(self.options)
                      if field.name in _TORCH_ARGUMENTS and getattr(self.options, field.name) != field.default)
        if self.device.type == "cuda":
            kwargs.update(device_ids=[self.device.index], output_device=self.device.index)
        self.gradient_comm.choose(module)  # the link is measured over the default group, DDP's
        bucket_cap_mb = self.gradient_comm.ddp_bucket_cap_mb(dist.get_backend(), kwargs.get("bucket_cap_mb"))
        if bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = bucket_cap_mb
        wrapped = AdvisingDistributedDataParallel(module, **kwargs)
        self.gradient_comm.register(wrapped, module)
        return wrapped

    def state_dict(self) -> dict:
        return self.gradient_comm.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.gradient_comm.load_state_dict(state)

    def communication_report(self, step_seconds: float) -> str | None:
        return self.gradient_comm.report(step_seconds)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        ddp = getattr(model, "_orig_mod", model)
        if isinstance(ddp, DistributedDataParallel):
            return ddp.no_sync()
        if comm.is_initialized():
            raise ConfigError("accumulate(model) needs the model returned by rt.setup(model), not the original module")
        return contextlib.nullcontext()

    def unwrap_wrapper(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model
