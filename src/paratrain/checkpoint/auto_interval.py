"""``every="auto"``: the checkpoint interval in steps, from the Young/Daly formula and measurements.

Rank 0 measures what a save costs training (the median of the last saves; before the first one, what
the earlier attempts' saves in ``goodput.jsonl`` blocked, else :data:`~paratrain.goodput.interval.DEFAULT_SAVE_COST_S`):
what it blocked, plus what the steps beside its background write took beyond the steps after it
(:func:`~paratrain.goodput.interval.write_slowdown_seconds`, known at the next save),
how long a background write takes, the mean step time (its ledger), and takes the failure rate from
``mtbf``, else from the run directory's earlier attempts, else :data:`~paratrain.goodput.interval.DEFAULT_MTBF_S`.
At the start and after every save (both collective) it broadcasts the interval in steps, so every rank
decides "due" alike without another collective; it prints the interval when it first has one and when
it changes by more than a quarter.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from paratrain import comm
from paratrain.goodput import interval, ledger

#: steps before the first save when no step time is known yet (it measures the save cost)
FIRST_STEPS = 20


class AutoInterval:
    """The agreed interval (``steps``) of one Checkpointer with ``every="auto"``."""

    def __init__(self, mtbf_s: float | None):
        self.mtbf_given = mtbf_s
        self.mtbf_s = mtbf_s or interval.DEFAULT_MTBF_S
        self.mtbf_source = "given" if mtbf_s else "default"
        self.costs: list[float] = []  # rank 0: seconds each save cost (blocked + steps slowed by its write)
        self.slowdowns: list[float] = []  # rank 0: of which the steps slowed beside the write
        self.write_s = 0.0  # rank 0: the last background write's seconds
        self._clocks: tuple[Any, Any] = (None, None)  # rank 0: the steps clock as the last write started and ended
        self.steps = FIRST_STEPS
        self._shown: int | None = None

    def start(self, directory: Path) -> None:
        """The first estimate, from the run directory's earlier attempts. Collective."""
        if comm.is_main():
            records = ledger.active().previous if ledger.active() is not None \
                else ledger.read_records(Path(directory) / ledger.LEDGER_FILE)
            if self.mtbf_given is None:
                estimate = interval.mtbf_from_attempts(records)
                if estimate is not None:
                    self.mtbf_s, failures = estimate
                    self.mtbf_source = f"from this run's {failures} failure(s)"
            self.costs = [r["end"] - r["start"] for r in records if r.get("event") == "save"
                          and isinstance(r.get("end"), (int, float)) and isinstance(r.get("start"), (int, float))][-5:]
            step_s = _previous_step_seconds(records)
        else:
            step_s = None
        self._agree(step_s)

    def after_save(self, blocked_s: float) -> None:
        """A save blocked training for ``blocked_s`` seconds (rank 0's figure counts). Collective."""
        if comm.is_main():
            # The previous save's write ended before this save (it waited for it): its steps' slowdown is known now.
            slowed = interval.write_slowdown_seconds(*self._clocks, ledger.steps_clock())
            self._clocks = (None, None)
            self.slowdowns = (self.slowdowns + [slowed])[-5:]
            self.costs = (self.costs + [blocked_s + slowed])[-5:]
        active = ledger.active()
        self._agree(active.step_seconds() if active is not None else None)

    def written(self, seconds: float, started: tuple[float, int] | None = None,
                finished: tuple[float, int] | None = None) -> None:
        """Rank 0: a background write took ``seconds``; ``started``/``finished``: the ledger's steps clock then."""
        self.write_s = seconds
        self._clocks = (started, finished)

    def _agree(self, step_s: float | None) -> None:
        text = None
        if comm.is_main():
            cost = statistics.median(self.costs) if self.costs else interval.DEFAULT_SAVE_COST_S
            seconds = interval.young_daly_seconds(cost, self.mtbf_s, self.write_s)
            if step_s:
                self.steps = interval.interval_steps(seconds, step_s)
            slowed = statistics.median(self.slowdowns) if self.slowdowns else 0.0
            text = (f"paratrain: checkpoint interval auto: every {self.steps} steps (~{seconds:.1f} s = √(2 · save cost "
                    f"{cost:.3f} s{'' if self.costs else ' assumed'}"
                    + (f" (of which {slowed:.3f} s the steps beside the write)" if slowed > 0 else "")
                    + f" · MTBF {self.mtbf_s:.0f} s {self.mtbf_source})"
                    + (f", at least the write's {self.write_s:.2f} s" if self.write_s > seconds - 1e-9 and self.write_s else "")
                    + (f"; {step_s:.3f} s per step)" if step_s else f"; first save after {self.steps} steps to measure)"))
        self.steps = int(comm.broadcast_object(self.steps))
        if text and (self._shown is None or abs(self.steps - self._shown) > 0.25 * self._shown):
            self._shown = self.steps
            print(text, file=sys.stderr, flush=True)


def _previous_step_seconds(records: list[dict]) -> float | None:
    """The mean step time of the newest earlier attempt that timed steps (its last ledger record)."""
    for record in reversed(records):
        if record.get("event") == "ledger":
            seconds = record.get("seconds") or {}
            steps = record.get("timed_steps")
            if steps:
                return (seconds.get("train", 0.0) + seconds.get("redone", 0.0)) / steps
    return None
