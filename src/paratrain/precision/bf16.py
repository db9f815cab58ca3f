"""bf16 autocast: fp32 weights and optimizer, matmuls in bfloat16, no loss scaling.

bfloat16 has fp32's exponent range, so gradients do not underflow and need no scaler.
"""

from __future__ import annotations

import torch

from paratrain.precision import register_precision
from paratrain.precision.api import Precision, check_autocast


@register_precision
class BF16MixedPrecision(Precision):
    """bf16 mixed precision: the forward under bfloat16 autocast, fp32 weights and optimizer; no loss scaling.

    Raises:
    ConfigError: the device cannot autocast to bfloat16 (e.g. a pre-Ampere GPU).
    """

    name = "bf16-mixed"
    autocast_dtype = torch.bfloat16
    deepspeed_config = {"bf16": {"enabled": True}}

    @classmethod
    def check_device(cls, device: torch.device) -> None:
        check_autocast(torch.device(device), cls.autocast_dtype, cls.name)
