"""Precisions by name: ``create_precision("bf16-mixed", device)``."""

from __future__ import annotations

import torch

from paratrain.errors import ConfigError
from paratrain.precision.api import Precision
from paratrain.precision.fp32 import FP32Precision

PRECISIONS: dict[str, type[Precision]] = {cls.name: cls for cls in (FP32Precision,)}


def create_precision(name: str, device: torch.device) -> Precision:
    """Instantiate the precision called ``name``.

    Raises:
        ConfigError: unknown name (lists the valid ones) or not supported on ``device``.
    """
    try:
        cls = PRECISIONS[name]
    except KeyError:
        raise ConfigError(f"unknown precision {name!r}; choose one of: {', '.join(PRECISIONS)}") from None
    return cls(device)


__all__ = ["PRECISIONS", "Precision", "create_precision"]
