"""The precision interface: which dtype the math runs in, and how gradients are scaled.

A strategy drives the optimizer step and asks its precision for each stage, so the
order is the same everywhere (Lightning Fabric hands ``backward`` to its precision
plugin the same way)::

    precision.backward(loss)          # scaled for fp16
    precision.unscale(optimizer)      # grads back to their true size (fp16)
    clip(...)                         # strategy's clip: sees unscaled gradients
    precision.optimizer_step(opt)     # fp16: skipped when a gradient is inf/NaN
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, ClassVar

import torch


class Precision(abc.ABC):
    """Numbers for one worker: autocast dtype and loss scaling.

    Args:
        device: the worker's device; autocast and the scaler are made for its type. A user's
            object (``pt.Runtime(precision=pt.BF16Mixed())``) needs none: the Runtime builds its
            own of the same class on the device it resolved.

    TF32 for the float32 parts is not a precision's business: ``Runtime(tf32=...)``
    sets it once, for every precision (:mod:`paratrain.runtime.tf32`).

    The constructor checks nothing: :meth:`check_device` says whether the device computes
    in this precision (``create_precision`` and ``runtime.resolve`` ask it first).
    """

    name: ClassVar[str]
    #: dtype that autocast computes matmuls in; None = no autocast.
    autocast_dtype: ClassVar[torch.dtype | None] = None
    #: This precision's part of a DeepSpeed engine config (the engine does its own autocast and scaling).
    deepspeed_config: ClassVar[dict[str, Any]] = {}

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)

    @classmethod
    def check_device(cls, device: torch.device) -> None:
        """Refuse a device that cannot compute in this precision (nothing to check for fp32).

        Raises:
            ConfigError: (subclasses) this torch build or device cannot autocast to the dtype.
        """

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context in which the forward pass (and loss) should run."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def fsdp_policy(self) -> Any:
        """FSDP2 ``MixedPrecisionPolicy``: parameters gathered in the compute dtype,
        gradients reduced in fp32 (a bf16 reduce-scatter loses digits over many ranks)."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        if self.autocast_dtype is None:
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=self.autocast_dtype, reduce_dtype=torch.float32)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring ``optimizer``'s gradients to their true size (no-op without scaling)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Apply the update; return False when it was skipped (inf/NaN gradients)."""
        optimizer.step()
        return True

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, device={self.device})"


def check_autocast(device: torch.device, dtype: torch.dtype, name: str) -> None:
    """Run one tiny matmul under autocast to prove ``device`` computes in ``dtype``.

    Raises:
        ConfigError: this torch build or device cannot autocast to ``dtype``.
    """
    from paratrain.errors import ConfigError

    advice = f"precision {name!r} is not supported on {device.type} by torch {torch.__version__}"
    # including_emulation=False: torch's default also says yes where bf16 only runs emulated
    # (V100, T4: no bf16 tensor cores), far slower than fp16 there. The check reads the
    # current device: Runtime made it this rank's GPU first (runtime.device.use_device).
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ConfigError(f"{advice} (this GPU has no bf16); use precision='fp16-mixed' or '32-true'")
    try:
        with torch.autocast(device.type, dtype=dtype):
            probe = torch.ones(2, 2, device=device) @ torch.ones(2, 2, device=device)
    except (RuntimeError, AssertionError) as exc:
        raise ConfigError(f"{advice} ({str(exc).splitlines()[0]}); use precision='32-true'") from exc
    if probe.dtype != dtype:
        raise ConfigError(f"{advice} (autocast computed in {probe.dtype}); use precision='32-true'")
