"""Batches of any shape (tensors in dicts, lists, tuples): move them, count their samples."""

from __future__ import annotations

from typing import Any

import torch


def move_to(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor (in dicts, lists, tuples) on ``device``.

    A copy from pinned host memory to a GPU is asynchronous (``non_blocking``): the
    host goes on while the copy runs, and the GPU's stream orders it before the
    kernels that read it. Any other copy blocks — a non-blocking copy *to* the host
    could be read before it has arrived.
    """
    if isinstance(batch, torch.Tensor):
        # is_pinned() is asked only for a copy to a GPU: on CPU it is a call per tensor per step for nothing.
        return batch.to(device, non_blocking=torch.device(device).type == "cuda" and batch.is_pinned())
    if isinstance(batch, dict):
        return {key: move_to(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to(value, device) for value in batch)
    return batch


def batch_length(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch
    for value in values:
        if isinstance(value, (torch.Tensor, dict, list, tuple)):
            return batch_length(value)
    return 1
