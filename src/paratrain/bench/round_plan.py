"""How the bench spends its time: rounds of every method, in an order that rotates, and enough
steps for each measured window to last ``--min-time`` seconds.

Interleaving spreads a slow minute of the machine (another job, a thermal limit)
over every method instead of charging it to the one that happened to run then;
rotating the order keeps the same method from always running first (cold caches)
or always after the heaviest one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from paratrain.errors import ConfigError

T = TypeVar("T")
MARGIN = 1.5  # the first method's window is aimed at 1.5 × --min-time, so that faster methods still reach it


def round_order(items: Sequence[T], round_index: int) -> list[T]:
    """Round 0 in the given order; round r starts at the r-th item and wraps around."""
    if not items:
        return []
    shift = round_index % len(items)
    return [*items[shift:], *items[:shift]]


def steps_for_min_time(steps: int, warmup_steps: int, window_s: float, min_time_s: float) -> int:
    """The optimizer steps that make a measured window of ``min_time_s`` (with a margin), given that
    ``steps − warmup_steps`` steps took ``window_s``; ``steps`` itself when that is already enough."""
    measured = steps - warmup_steps
    if min_time_s <= 0 or window_s >= min_time_s or measured < 1:
        return steps
    per_step = max(window_s, 1e-9) / measured
    return warmup_steps + max(measured, math.ceil(MARGIN * min_time_s / per_step))


def check_rounds(repeats: int, min_time_s: float) -> None:
    """Check the bench's ``--repeats`` and ``--min-time``.

    Raises:
        ConfigError: ``--repeats`` below 1 or ``--min-time`` negative.
    """
    if repeats < 1:
        raise ConfigError(f"--repeats must be at least 1 (1 for a quick look, 3 or more to see the noise), got {repeats}")
    if not min_time_s >= 0:
        raise ConfigError(f"--min-time must be 0 or more seconds (0: exactly --steps), got {min_time_s:g}")
