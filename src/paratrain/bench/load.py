"""How busy the machine was with other work around and during a method's run.

The load average counts the method's own processes (and trails by a minute); what
perturbs a timing is *other* work. So the bench samples how many cores are busy in
a short window right before and right after each run, while nothing of its own
runs, and during the run counts the CPU time of everything but the method's tree
(the whole machine's busy time minus that of the bench and its waited-for children).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

import psutil

SAMPLE_S = 0.3
CHANGE_CORES = 0.5  # a change of half a core or more is worth a flag on the row


def busy_cores(window_s: float = SAMPLE_S) -> float:
    """Cores busy over the next ``window_s`` seconds (this process sleeps meanwhile)."""
    return round(psutil.cpu_percent(interval=window_s) / 100 * (os.cpu_count() or 1), 2)


def _machine_busy_s() -> float:
    times = psutil.cpu_times()._asdict()
    # guest time is already inside user time on Linux; idle and iowait are not work
    return sum(times.get(name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


def _own_tree_s() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class OtherWork:
    """Started before a method, read after it has been waited for: cores busy with other work meanwhile."""

    def __init__(self):
        self._machine, self._own, self._clock = _machine_busy_s(), _own_tree_s(), time.monotonic()

    def cores(self) -> float:
        elapsed = time.monotonic() - self._clock
        other = (_machine_busy_s() - self._machine) - (_own_tree_s() - self._own)
        return round(max(0.0, other / elapsed), 2) if elapsed > 0 else 0.0


@dataclass(frozen=True)
class Load:
    """Cores busy with other work: just before the run, during it, just after it."""

    before: float
    during: float
    after: float

    @property
    def changed(self) -> bool:
        """Other work came or went around this run, or ran beside it."""
        return abs(self.after - self.before) >= CHANGE_CORES or self.during >= CHANGE_CORES

    def describe(self) -> str:
        return f"{self.before:g} → {self.during:g} → {self.after:g} cores busy with other work"
