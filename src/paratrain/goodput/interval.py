"""How often to checkpoint: the Young/Daly interval from a measured save cost and a failure rate.

Young (1974) and Daly (2006): with a save costing ``C`` seconds of training and failures every
``MTBF`` seconds on average, the wall time lost to saving plus redoing is smallest when saving
every ``√(2 · C · MTBF)`` seconds (first-order; good while ``C`` ≪ ``MTBF``). ``C`` is what a save
*blocks* training: with background writes only the snapshot — but a save cannot start before the
previous one is written, so the interval is at least the write's duration (saving more often would
block on it). Pure arithmetic; :class:`~paratrain.checkpoint.auto_interval.AutoInterval` feeds it.
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
