"""The ledger's records summed: each attempt's seconds by category, the gaps between attempts, the run.

Pure: records in, numbers out (``paratrain goodput`` prints them, ``summary.json`` keeps them, the
timeline draws them). An attempt's seconds are its last ``ledger`` record's; the time from one
attempt's last record to the next attempt's start is ``recovery`` (the failure, its detection, the
restart, the new launch until its clock starts); a launcher's ``end`` record closes the last span of
its attempt — ``rest`` after a finished attempt, ``recovery`` after a failed one. A launcher's ``launch``
record (``paratrain train`` writes one when the ledger exists) before the first attempt's start is a launch
whose workers died before their clock started: that time is ``recovery`` too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from paratrain.goodput.ledger import CATEGORIES

TITLES = {"startup": "start-up (launch → first step)", "train": "training", "redone": "redone steps",
          "save": "save blocking", "eval": "evaluation", "rest": "the rest", "recovery": "restart/recovery wait"}


@dataclasses.dataclass
class Attempt:
    number: int
    origin: float
    end: float
    seconds: dict[str, float]
    step: int = 0
    ended: bool = False  # its last step and save done (False: it failed or was stopped)
    saves: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    evals: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    redone: dict[str, Any] | None = None
    first_step: float | None = None

    @property
    def wall(self) -> float:
        return self.end - self.origin


@dataclasses.dataclass
class Account:
    attempts: list[Attempt]
    seconds: dict[str, float]  # summed over attempts, gaps included
    start: float
    end: float

    @property
    def wall(self) -> float:
        return self.end - self.start

    @property
    def accounted(self) -> float:
        """The share of the wall time (first launch → last record) that some category holds."""
        return sum(self.seconds.values()) / self.wall if self.wall > 0 else 1.0

    @property
    def goodput(self) -> float:
        """The share of the wall time that trained steps for the first time."""
        return self.seconds.get("train", 0.0) / self.wall if self.wall > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"wall_seconds": round(self.wall, 3), "goodput": round(self.goodput, 4),
                "accounted": round(self.accounted, 4), "attempts": len(self.attempts),
                "failed_attempts": sum(1 for a in self.attempts if not a.ended),
                "saves": sum(len(a.saves) for a in self.attempts),
                "seconds": {k: round(self.seconds.get(k, 0.0), 3) for k in CATEGORIES}}

    def table(self) -> list[str]:
        """The table ``paratrain goodput`` prints: one row per category, seconds and share."""
        width = max(len(t) for t in TITLES.values())
        lines = [f"{'category':<{width}}  {'seconds':>10}  {'share':>6}"]
        for key in CATEGORIES:
            value = self.seconds.get(key, 0.0)
            share = value / self.wall if self.wall > 0 else 0.0
            lines.append(f"{TITLES[key]:<{width}}  {value:>10.1f}  {share:>6.1%}")
        lines.append(f"{'wall time':<{width}}  {self.wall:>10.1f}  {self.accounted:>6.1%} accounted")
        failed = sum(1 for a in self.attempts if not a.ended)
        saves = [s for a in self.attempts for s in a.saves]
        lines.append(f"goodput {self.goodput:.1%} over {len(self.attempts)} attempt(s), {failed} failed; "
                     f"{len(saves)} save(s)" + (f", blocking {_mean([s['end'] - s['start'] for s in saves]):.3f} s each on average"
                                                 if saves else ""))
        return lines


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def account(records: list[dict[str, Any]]) -> Account | None:
    """The run's account from its ``goodput.jsonl`` records; None before any attempt started."""
    attempts: list[Attempt] = []
    first_launch: float | None = None  # a launcher's start before the first attempt (one killed before its clock)
    for record in records:
        event, time_ = record.get("event"), record.get("time")
        if not isinstance(time_, (int, float)):
            continue
        if event == "launch" and not attempts:
            first_launch = float(time_) if first_launch is None else min(first_launch, float(time_))
            continue
        if event == "attempt":
            origin = float(record.get("origin", time_))
            # until its first ledger record: start-up (it may die before one)
            attempts.append(Attempt(int(record.get("attempt", len(attempts) + 1)), origin, float(time_),
                                    {"startup": max(0.0, float(time_) - origin)}))
            continue
        if not attempts:
            continue
        current = attempts[-1]
        if event == "ledger":
            current.seconds = {k: float(v) for k, v in (record.get("seconds") or {}).items()}
            current.end = float(time_)
            current.step = int(record.get("step") or 0)
            current.ended = bool(record.get("ended"))
        elif event == "save":
            current.saves.append(record)
        elif event == "eval":
            current.evals.append(record)
        elif event == "redone":
            current.redone = record
        elif event == "end" and time_ > current.end:  # the launcher's exit after its workers'
            tail = "rest" if current.ended else "recovery"
            current.seconds[tail] = current.seconds.get(tail, 0.0) + float(time_) - current.end
            current.end = float(time_)
    if not attempts:
        return None
    totals = dict.fromkeys(CATEGORIES, 0.0)
    for index, attempt in enumerate(attempts):
        if index:  # the gap since the previous attempt's last record
            gap = attempt.origin - attempts[index - 1].end
            if gap > 0:
                attempt.seconds["recovery"] = attempt.seconds.get("recovery", 0.0) + gap
        for key, value in attempt.seconds.items():
            if key in totals:
                totals[key] += value
    start = attempts[0].origin
    if first_launch is not None and first_launch < start:  # a launch that died before any attempt's clock started
        totals["recovery"] += start - first_launch
        start = first_launch
    return Account(attempts, totals, start, max(a.end for a in attempts))
