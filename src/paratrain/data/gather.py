"""Gather per-rank evaluation results of unequal sizes, in dataset order.

With the exact evaluation loader (``exact=True``) rank ``r`` holds the ``r``-th
contiguous block of the dataset, so concatenating every rank's results in rank order
gives one entry per sample, in dataset order, with no duplicates (gathering equal-size lists
instead would count the samples a sampler pads with twice).
"""

from __future__ import annotations

from typing import Any

import torch

from paratrain import comm
from paratrain.errors import DistributedError


def gather(*values: Any, dst: int | None = None) -> Any:
    """Concatenate every rank's results in rank order. Collective.

    All ranks must call it together with the same number and kinds of values, or
    the job waits until the process group's timeout.

    Each value is gathered by kind:

    * a tensor → one tensor concatenated along dim 0 (first dims may differ per
      rank, and may be 0 on a rank whose shard is empty: its dtype and trailing
      shape are then taken from the other ranks);
    * a list → one list, the ranks' lists concatenated;
    * anything else → a list with one entry per rank.

    Args:
        *values: one or more per-rank results; ``preds, labels = gather(preds, labels)``.
        dst: ``None`` returns the result on every rank; a rank number returns it on
            that rank only, ``None`` elsewhere (objects then travel to ``dst`` only).

    Returns:
        The gathered value, or a tuple of them for several values.

    Raises:
        DistributedError: non-empty tensors disagree in dtype or trailing shape across
            ranks (names each rank's shape).
    """
    gathered = tuple(_gather_one(value, dst) for value in values)
    return gathered[0] if len(gathered) == 1 else gathered


def _gather_one(value: Any, dst: int | None) -> Any:
    if isinstance(value, torch.Tensor):
        parts = comm.all_gather(_agree_on_empty(value))
        return torch.cat(parts) if dst is None or comm.rank() == dst else None
    parts = comm.all_gather_object(value) if dst is None else comm.gather_object(value, dst=dst)
    if parts is None:
        return None
    if isinstance(value, list):
        return [item for part in parts for item in part]
    return list(parts)


def _agree_on_empty(tensor: torch.Tensor) -> torch.Tensor:
    """Give an empty shard's tensor the dtype and trailing shape of the non-empty ones.

    A rank with no samples usually builds its result from an empty list
    (``torch.tensor([])`` is float32 of shape ``(0,)``); the others' logits may be
    ``(k, classes)`` int64 predictions — all_gather needs them to agree.
    """
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    metas = comm.all_gather_object((tuple(tensor.shape), str(tensor.dtype)))
    filled = [(shape, dtype) for shape, dtype in metas if shape[0] > 0]
    if not filled:
        return tensor
    trailing = {(shape[1:], dtype) for shape, dtype in filled}
    if len(trailing) > 1:
        raise DistributedError(
            "gather: ranks disagree on trailing shape/dtype ("
            + ", ".join(f"rank {r}: {tuple(shape)} {dtype}" for r, (shape, dtype) in enumerate(metas))
            + "); return the same kind of tensor from every rank"
        )
    shape, dtype = filled[0]
    if tensor.shape[0] == 0:
        return torch.empty((0, *shape[1:]), dtype=getattr(torch, dtype.removeprefix("torch.")), device=tensor.device)
    return tensor
