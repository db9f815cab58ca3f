"""Which rank holds the others back, and why: pure decisions over every rank's timings of a log interval.

A data-parallel step ends together on every rank, so the step time does not tell a slow rank from a fast
one; the time a rank spends on its own work does. Each log interval, every rank's data wait and compute per
step (:mod:`paratrain.diagnostics.step_phases`) are compared with the median rank's: a rank whose own work is
at least ``threshold`` (10 %) slower is slow in that interval, and the part it is slowest in (data or compute,
against the median of that part) is the cause. A rank whose fastest round trip to the job's store is that
much slower than the median rank's — and slower by at least ``link_floor_s`` (the difference between loopback
and a LAN is not a fault) — has a slow link. A rank slow for the same cause in ``intervals`` (3) log intervals
in a row is a straggler: the log says it once, and again when it changes or recovers. Log intervals shorter
than ``MIN_JUDGED_S`` of work are pooled until they are that long, so scheduling noise of a few milliseconds
is never a verdict (with fast steps and a small ``--log-every``, an interval is then several log lines). A
run that mostly waits for its links (little own work a step) would pool for minutes: once the pooled
intervals hold ``MIN_LINK_JUDGED_S`` of steps, the links alone are judged (each rank's link is then the
median of its intervals' fastest round trips — one lucky moment of an idle queue is not the link), and the
streaks of the own-work parts wait for an interval with enough work.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

THRESHOLD = 0.10
INTERVALS = 3
LINK_FLOOR_S = 0.002
MIN_JUDGED_S = 1.0  # log intervals shorter than this (the median rank's own work) are pooled before a verdict
MIN_LINK_JUDGED_S = 3.0  # ... but the links are judged once the pooled intervals hold this many seconds of steps


@dataclass(frozen=True)
class RankInterval:
    """One rank's log interval: optimizer steps, seconds of data wait, compute and communication, and its
    fastest store round trip (NaN: not measured)."""

    rank: int
    host: str
    steps: int
    data_s: float
    compute_s: float
    communication_s: float
    link_s: float = math.nan
    link_samples: tuple[float, ...] = ()  # pooled: each interval's fastest round trip (link_s is their median)

    def plus(self, other: RankInterval) -> RankInterval:
        """This interval and the next one of the same rank, pooled."""
        links = tuple(v for v in (*self._links(), *other._links()) if math.isfinite(v))
        return RankInterval(self.rank, self.host, self.steps + other.steps, self.data_s + other.data_s,
                            self.compute_s + other.compute_s, self.communication_s + other.communication_s,
                            statistics.median(links) if links else math.nan, links)

    def _links(self) -> tuple[float, ...]:
        return self.link_samples or (self.link_s,)

    def per_step(self, seconds: float) -> float:
        return seconds / self.steps if self.steps else 0.0

    @property
    def own_s(self) -> float:
        """This rank's own work per step: data wait + compute (not waiting for the others)."""
        return self.per_step(self.data_s + self.compute_s)

    @property
    def step_s(self) -> float:
        """Seconds of steps in this interval: data wait, compute and communication."""
        return self.data_s + self.compute_s + self.communication_s


@dataclass(frozen=True)
class Slowness:
    """A rank slower than the median in one interval: the ``part`` (``data``, ``compute`` or ``link``), how much
    slower (``slower``: 0.25 = 25 %), and its and the median's value of that part (seconds per step; for the
    link, per round trip)."""

    rank: int
    host: str
    part: str
    slower: float
    value_s: float
    median_s: float


def slow_ranks(ranks: list[RankInterval], threshold: float = THRESHOLD,
               link_floor_s: float = LINK_FLOOR_S, own_work: bool = True) -> dict[int, Slowness]:
    """The ranks slower than the median in this interval, by rank (at most one cause each: their own work first;
    only the links when not ``own_work``)."""
    ranks = [r for r in ranks if r.steps > 0]
    if len(ranks) < 2:
        return {}
    slow: dict[int, Slowness] = {}
    own = statistics.median(r.own_s for r in ranks)
    medians = {"data": statistics.median(r.per_step(r.data_s) for r in ranks),
               "compute": statistics.median(r.per_step(r.compute_s) for r in ranks)}
    for r in ranks:
        if own_work and own > 0 and r.own_s >= (1 + threshold) * own:
            values = {"data": r.per_step(r.data_s), "compute": r.per_step(r.compute_s)}
            part = max(values, key=lambda p: values[p] - medians[p])
            slow[r.rank] = Slowness(r.rank, r.host, part, r.own_s / own - 1, values[part], medians[part])
    links = [r.link_s for r in ranks if math.isfinite(r.link_s)]
    if len(links) == len(ranks):
        median_link = statistics.median(links)
        for r in ranks:
            if r.rank not in slow and r.link_s >= (1 + threshold) * median_link and r.link_s - median_link >= link_floor_s:
                slow[r.rank] = Slowness(r.rank, r.host, "link", r.link_s / max(median_link, 1e-9) - 1, r.link_s, median_link)
    return slow


@dataclass
class StragglerWatch:
    """Counts each rank's run of slow intervals; says when one becomes a straggler, changes cause or recovers.
    Rank 0 keeps it; not collective."""

    threshold: float = THRESHOLD
    intervals: int = INTERVALS
    streaks: dict[int, tuple[str, int]] = field(default_factory=dict)  # rank -> (part, intervals in a row)
    flagged: dict[int, Slowness] = field(default_factory=dict)  # the stragglers now
    history: dict[tuple[int, str], dict] = field(default_factory=dict)  # (rank, part) -> summary of its episodes
    min_judged_s: float = MIN_JUDGED_S
    pending: list[RankInterval] = field(default_factory=list)  # intervals pooled for the own-work parts
    link_pending: list[RankInterval] = field(default_factory=list)  # ... and for the links alone

    def observe(self, ranks: list[RankInterval], step: int) -> list[str]:
        """One log interval's timings at ``step``; the lines to log (none on most intervals)."""
        latest = ranks
        ranks = _pooled(self.pending, latest)
        busy = [r.data_s + r.compute_s for r in ranks if r.steps]
        own_work = bool(busy) and statistics.median(busy) >= self.min_judged_s
        if own_work:
            self.pending, self.link_pending = [], []
        else:
            # The own-work parts keep pooling while the links are judged on a pool of their own: a rank that
            # waits most of each step for a slow peer (little own work a step) still gets its own work judged
            # once it adds up, instead of the links' verdict emptying the pool every few seconds.
            self.pending = ranks
            ranks = _pooled(self.link_pending, latest)
            if not busy or statistics.median(r.step_s for r in ranks if r.steps) < MIN_LINK_JUDGED_S:
                self.link_pending = ranks
                return []
            self.link_pending = []
        slow = slow_ranks(ranks, self.threshold, own_work=own_work)
        lines = []
        for rank in sorted(set(self.streaks) | set(slow)):
            now = slow.get(rank)
            part, count = self.streaks.get(rank, ("", 0))
            if not own_work and now is None and part in ("data", "compute"):
                continue  # not judged this time: its streak waits for an interval with enough own work
            count = count + 1 if now is not None and now.part == part else (1 if now is not None else 0)
            if now is None:
                self.streaks.pop(rank, None)
            else:
                self.streaks[rank] = (now.part, count)
            was = self.flagged.get(rank)
            if now is not None and count >= self.intervals:
                if was is None or was.part != now.part:
                    lines.append(straggler_line(now, count, self.threshold))
                self.flagged[rank] = now
                entry = self.history.setdefault((rank, now.part), {
                    "rank": rank, "host": now.host, "part": now.part, "first_step": step, "intervals": 0,
                    "slower": 0.0})
                entry["intervals"] += 1 if count > self.intervals else self.intervals
                entry["slower"] = round(max(entry["slower"], now.slower), 3)
                entry["last_step"] = step
            elif was is not None and (now is None or now.part != was.part):
                lines.append(f"straggler: rank {rank} ({was.host}) is back within {self.threshold:.0%} of the median "
                             f"rank's {_what(was.part)}")
                del self.flagged[rank]
        return lines

    def summary(self) -> list[dict]:
        """Every straggler episode of the run (rank, host, part, first and last step, intervals, most slower)."""
        return list(self.history.values())


def _pooled(pending: list[RankInterval], ranks: list[RankInterval]) -> list[RankInterval]:
    """``ranks``' intervals added to the pooled ones, rank by rank (the pool is dropped if the ranks changed)."""
    return [a.plus(b) for a, b in zip(pending, ranks)] if pending and len(pending) == len(ranks) else ranks


def straggler_line(s: Slowness, intervals: int, threshold: float = THRESHOLD) -> str:
    """The line that names a straggler, its host and the slow part."""
    unit = "per round trip to the job's store" if s.part == "link" else "per step"
    return (f"straggler: rank {s.rank} ({s.host}) is {s.slower:.0%} slower than the median rank for {intervals} log "
            f"intervals: {_what(s.part)} {s.value_s * 1e3:.1f} ms {unit} (median {s.median_s * 1e3:.1f} ms)"
            f"{_hint(s.part)}")


def summary_line(episode: dict) -> str:
    return (f"straggler: rank {episode['rank']} ({episode['host']}), {_what(episode['part'])}, up to "
            f"{episode['slower']:.0%} slower, steps {episode['first_step']}–{episode.get('last_step')} "
            f"({episode['intervals']} log intervals)")


def _what(part: str) -> str:
    return {"data": "data wait", "compute": "compute", "link": "link"}[part]


def _hint(part: str) -> str:
    return {"data": " — its loader is slow: more --num-workers, faster storage, or less work per sample",
            "compute": " — its CPU/GPU is slower or shared: other jobs, a CPU quota, throttling",
            "link": " — its network path to node 0 is slow: check that host's interface and route"}[part]
