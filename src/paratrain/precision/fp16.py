"""fp16 autocast with dynamic loss scaling (``torch.amp.GradScaler``).

float16 gradients underflow to zero below ~6e-8, so the loss is multiplied by a
large scale before ``backward``; the gradients are divided back (``unscale``) before
anyone looks at them (clipping!), and a step whose gradients overflowed is skipped
while the scale is halved. The scaler's state is checkpointed with the rest.
"""

from __future__ import annotations

from typing import Any

import torch

from paratrain.comm import get_logger
from paratrain.precision import register_precision
from paratrain.precision.api import Precision, check_autocast


@register_precision
class FP16MixedPrecision(Precision):
    """fp16 mixed precision: the forward under float16 autocast, the loss scaled by a ``GradScaler``
    (unscaled before clipping; a step with inf/NaN gradients skipped and the scale lowered).

    Raises:
    ConfigError: this torch cannot autocast to float16 on the device.
    """

    name = "fp16-mixed"
    autocast_dtype = torch.float16
    deepspeed_config = {"fp16": {"enabled": True}}

    @classmethod
    def check_device(cls, device: torch.device) -> None:
        check_autocast(torch.device(device), cls.autocast_dtype, cls.name)

    def __init__(self, device: torch.device | str = "cpu"):
        super().__init__(device)
        self.scaler = torch.amp.GradScaler(self.device.type)
        #: optimizer steps skipped because a gradient was inf/NaN (the scale was lowered).
        self.skipped_steps = 0

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    # With FSDP2 the gradients are sharded DTensors; DTensor's handler for the scaler's
    # inf check all-reduces found_inf over the mesh, so every rank skips the same steps.

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        # GradScaler remembers per optimizer that it already unscaled, so its step() will not do it twice.
        self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        scale = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        # update() lowers the scale exactly when step() found inf/NaN and skipped the update.
        new_scale = self.scaler.get_scale()
        if new_scale < scale:
            self.skipped_steps += 1
            get_logger().info(
                "fp16-mixed: optimizer step skipped (inf/NaN gradients); loss scale %g -> %g (%d skipped so far)",
                scale, new_scale, self.skipped_steps,
            )
            return False
        return True

    @property
    def scale(self) -> float:
        """The current loss scale."""
        return self.scaler.get_scale()

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict(), "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scaler.load_state_dict(state["scaler"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
