"""How often to checkpoint: the Young/Daly interval from a measured save cost and a failure rate.

Young (1974) and Daly (2006): with a save costing ``C`` seconds of training and failures every
``MTBF`` seconds on average, the wall time lost to saving plus redoing is smallest when saving
every ``√(2 · C · MTBF)`` seconds (first-order; good while ``C`` ≪ ``MTBF``). ``C`` is what a save
costs training: what it *blocks* (with background writes only the snapshot) and what the steps that
ran beside its write took beyond steps after it (:func:`write_slowdown_seconds`: on a GPU, whose
training thread needs the interpreter lock to launch kernels, that is most of it) — and a save cannot
start before the previous one is written, so the interval is at least the write's duration (saving
more often would block on it). Pure arithmetic; :class:`~paratrain.checkpoint.auto_interval.AutoInterval` feeds it.
"""

from __future__ import annotations

import math
from typing import Any

#: the failure rate assumed when neither ``--mtbf`` nor the run's own attempts give one
DEFAULT_MTBF_S = 3600.0
#: the save cost assumed before the first save was measured
DEFAULT_SAVE_COST_S = 1.0


def young_daly_seconds(save_cost_s: float, mtbf_s: float, write_s: float = 0.0) -> float:
    """``√(2 · C · MTBF)``, and at least ``write_s`` (a background write must end before the next save)."""
    if save_cost_s < 0 or mtbf_s <= 0:
        raise ValueError(f"save cost {save_cost_s} s and MTBF {mtbf_s} s: need C >= 0 and MTBF > 0")
    return max(math.sqrt(2.0 * save_cost_s * mtbf_s), write_s)


def write_slowdown_seconds(started: tuple[float, int] | None, finished: tuple[float, int] | None,
                           now: tuple[float, int] | None) -> float:
    """Seconds the steps that ran beside a background write took beyond what steps took after it.

    Each argument is a reading of the steps' clock (``(seconds, steps)`` summed since the attempt began):
    as the write started, as it finished, and now (the next save). The steps between the first two ran
    beside the write; those between the last two, after it, are the reference. 0 when a reading is
    missing, when no step ran beside the write, when fewer than two ran after it (no reference), or when
    the steps beside it were not slower.
    """
    if started is None or finished is None or now is None:
        return 0.0
    (s0, n0), (s1, n1), (s2, n2) = started, finished, now
    beside, after = n1 - n0, n2 - n1
    if beside < 1 or after < 2:
        return 0.0
    return max(0.0, (s1 - s0) - beside * (s2 - s1) / after)


def interval_steps(interval_s: float, step_s: float) -> int:
    """The interval in whole steps of ``step_s`` seconds (at least 1)."""
    if step_s <= 0:
        return 1
    return max(1, round(interval_s / step_s))


def mtbf_from_attempts(records: list[dict[str, Any]]) -> tuple[float, int] | None:
    """``(MTBF seconds, failures)`` from a ``goodput.jsonl``'s attempts: the wall time they span over
    the attempts that failed (did not end); None before the first failure. Give it the records of
    the attempts before the running one (a running attempt has not ended either)."""
    from paratrain.goodput.accounting import account

    run = account(records)
    if run is None:
        return None
    failures = sum(1 for attempt in run.attempts if not attempt.ended)
    if failures < 1:
        return None
    return run.wall / failures, failures
