"""Batches of any shape (tensors in dicts, lists, tuples): move them (``data/to_device.py``), count their samples."""

from __future__ import annotations

from typing import Any

import torch

from paratrain.data.to_device import move_to

__all__ = ["batch_length", "move_to"]


def batch_length(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch
    for value in values:
        if isinstance(value, (torch.Tensor, dict, list, tuple)):
            return batch_length(value)
    return 1
