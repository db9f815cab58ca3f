"""Precisions by name: ``create_precision("bf16-mixed", device)``.

=============  ====================================================================
``32-true``    fp32 everywhere (TF32 matmuls on CUDA unless ``tf32=False``)
``bf16-mixed`` autocast to bfloat16, fp32 weights, no scaler
``fp16-mixed`` autocast to float16, fp32 weights, ``GradScaler`` (state checkpointed)
=============  ====================================================================
"""

from __future__ import annotations

import torch

from paratrain.errors import ConfigError
from paratrain.precision.api import Precision
from paratrain.precision.bf16 import BF16MixedPrecision
from paratrain.precision.fp16 import FP16MixedPrecision
from paratrain.precision.fp32 import FP32Precision

PRECISIONS: dict[str, type[Precision]] = {
    cls.name: cls for cls in (FP32Precision, BF16MixedPrecision, FP16MixedPrecision)
}


def create_precision(name: str, device: torch.device) -> Precision:
    """Instantiate the precision called ``name`` for ``device``, checked first (:func:`check_precision`).

    Raises:
        ConfigError: unknown name (lists the valid ones) or not supported on ``device``.
    """
    check_precision(name, device)
    return PRECISIONS[name](device)


def check_precision(name: str, device: torch.device | None = None) -> None:
    """Refuse an unknown precision name, and one that ``device`` cannot compute in
    (a small autocast probe on it; ``None``: the name alone).

    Raises:
        ConfigError: ``name`` is not a registered precision (lists them), or ``device`` cannot run it.
    """
    if name not in PRECISIONS:
        raise ConfigError(f"unknown precision {name!r}; choose one of: {', '.join(PRECISIONS)}")
    if device is not None:
        PRECISIONS[name].check_device(device)


__all__ = ["PRECISIONS", "Precision", "check_precision", "create_precision"]
