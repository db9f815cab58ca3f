"""Scalars for logging, reduced over the global batch.

The loss a rank logs is the mean over *its* samples. Averaging those means over
ranks is wrong as soon as ranks hold different numbers of samples (exact
evaluation, a last partial batch): two ranks with means 1.0 over 1 sample and 4.0
over 3 samples have a global mean of 3.25, not 2.5. Here every rank contributes
``mean × count`` and ``count``, and one all-reduce gives the global mean.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from paratrain import comm


def _as_double(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().double().reshape(())
    return torch.tensor(float(value), dtype=torch.float64)


def _mean_of(total: torch.Tensor, count: torch.Tensor) -> float:
    both = comm.all_reduce(torch.stack([total, count]), op="sum").tolist()
    return both[0] / both[1] if both[1] > 0 else math.nan


def global_mean(value: Any, count: int | float = 1) -> float:
    """Mean over all ranks' samples, given this rank's mean over ``count`` samples. Collective.

    All ranks must call it together. Without a process group it returns ``value``.
    ``count`` may be 0 on a rank with no samples; NaN when every count is 0.
    """
    mean = _as_double(value)
    return _mean_of(mean * count, torch.full_like(mean, float(count)))


class RunningMean:
    """Accumulates ``value × count`` over steps; :meth:`compute` gives the global mean.

    ``update`` does no communication and no device sync (tensors stay on their
    device), so it is cheap to call every step.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._total: torch.Tensor | None = None
        self._count = 0.0

    def update(self, value: Any, count: int | float = 1) -> None:
        """Add this rank's mean ``value`` over ``count`` samples."""
        weighted = _as_double(value) * count
        self._total = weighted if self._total is None else self._total + weighted
        self._count += float(count)

    def compute(self) -> float:
        """The mean over every sample every rank has added. Collective: all ranks call it together."""
        total = self._total if self._total is not None else torch.zeros((), dtype=torch.float64)
        return _mean_of(total, torch.full_like(total, self._count))
