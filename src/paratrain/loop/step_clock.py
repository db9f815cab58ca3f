"""``StepClock``: the mean optimizer-step time over a few steps early in a run.

The fit loop hands it to the strategy, which compares it with the link it measured
(multi-node DDP): "communication bounds this job" is only worth saying with numbers.
"""

from __future__ import annotations

import math

#: Steps timed (after the first ones, which warm up: allocator, DDP's bucket rebuild).
WARMUP_STEPS, TIMED_STEPS = 3, 10


class StepClock:
    """Times optimizer steps ``first + WARMUP_STEPS`` to ``first + WARMUP_STEPS + TIMED_STEPS``
    of this run (``first``: the step the run starts from, after a resume)."""

    def __init__(self) -> None:
        self._start: int | None = None
        self._clock = math.nan

    def after_step(self, step: int, train_seconds: float) -> float | None:
        """Note a finished ``step`` at ``train_seconds`` of training time; returns the mean
        seconds per step once, when the timed steps are done, else None."""
        if self._start is None:
            self._start = step + WARMUP_STEPS
        if step == self._start:
            self._clock = train_seconds
        elif step == self._start + TIMED_STEPS and not math.isnan(self._clock):
            return (train_seconds - self._clock) / TIMED_STEPS
        return None
