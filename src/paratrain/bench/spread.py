"""What repeated runs of one figure say: its median and range, and whether a method is faster than a baseline.

A figure measured once on a shared machine is one draw of its noise. Over rounds
the bench reports the median and the smallest-to-largest range, and calls a method
faster or slower than the baseline only when the two ranges do not overlap: any
overlap, or a single run on either side, and the table says so instead of guessing.

Beside the verdict, each method's samples/s is divided by the baseline's *of the same
round* (:func:`per_round_ratio`). Rounds are minutes apart and the machine's speed drifts
between them; within a round both methods ran in the same few minutes, so the ratio's
spread shows how far apart the two are with that drift taken out. It is shown, not used
for the verdict: with five rounds, five ratios on one side of 1 happen by chance one time
in sixteen.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from paratrain.errors import ConfigError

FASTER, SLOWER, INDISTINGUISHABLE, BASELINE, NOT_JUDGED = "faster", "slower", "indistinguishable", "baseline", "one run"


@dataclass(frozen=True)
class Spread:
    """``median`` of ``n`` runs, the smallest (``low``) and the largest (``high``)."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread | None:
        """The spread of ``values``, or None when there are none."""
        values = sorted(values)
        if not values:
            return None
        return cls(median=statistics.median(values), low=values[0], high=values[-1], n=len(values))

    def scaled(self, factor: float) -> Spread:
        return Spread(self.median * factor, self.low * factor, self.high * factor, self.n)


def pick_baseline(speeds: Mapping[str, Spread], requested: str | None = None,
                  yardsticks: Collection[str] | None = None) -> str | None:
    """The method the others are judged against: ``requested`` when it was measured, else the one
    with the highest median among ``yardsticks`` (the methods that trained what single trained; all
    when None or when none of them was measured); None when nothing was measured (or ``requested`` was not)."""
    if requested is not None:
        return requested if requested in speeds else None
    pool = [name for name in speeds if yardsticks is None or name in yardsticks] or list(speeds)
    return max(pool, key=lambda name: speeds[name].median, default=None)


def verdict(speed: Spread, baseline: Spread) -> str:
    """``faster`` / ``slower`` when the ranges of samples/s do not overlap, else ``indistinguishable``;
    ``one run`` when either side has a single run (a single draw has no range to compare)."""
    if speed.n < 2 or baseline.n < 2:
        return NOT_JUDGED
    if speed.low > baseline.high:
        return FASTER
    if speed.high < baseline.low:
        return SLOWER
    return INDISTINGUISHABLE


def per_round_ratio(values: Mapping[int, float], baseline: Mapping[int, float]) -> Spread | None:
    """The median and range of ``values[r] / baseline[r]`` over the rounds ``r`` both have (round → figure);
    None when they share no round."""
    return Spread.of(values[r] / baseline[r] for r in values if r in baseline and baseline[r] > 0)


def check_baseline(baseline: str | None, methods: list[str]) -> None:
    """Check that ``--baseline``, when given, is one of the methods run.

    Raises:
        ConfigError: ``--baseline`` names a method that is not run.
    """
    if baseline is not None and baseline not in methods:
        raise ConfigError(f"--baseline {baseline!r} is not among the methods run ({', '.join(methods)}); "
                          "name one of them, or leave --baseline out to judge against the fastest")
