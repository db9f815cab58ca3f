"""One row per method and the whole benchmark's result, as the reports read them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from paratrain.bench.figures import Figures
from paratrain.bench.load import Load
from paratrain.bench.spread import Spread

# What a row is: trained and measured; started but crashed; started but ran past --timeout;
# could not start (library or launcher missing); not started, as it cannot run with these
# processes (hsdp's mesh with an odd number). A row always says which, and why.
MEASURED, FAILED, TIMED_OUT, NOT_INSTALLED, NOT_RUN = "measured", "failed", "timed out", "not installed", "not run"


@dataclass
class Run:
    """One run of one method, in one round. ``kind``: measured, failed or timed out."""

    round: int
    kind: str
    load: Load
    started: float = 0.0  # time.time() at its start: the order the runs ran in
    wall_s: float | None = None
    first_step_s: float | None = None
    samples_per_s: float | None = None
    window_s: float | None = None  # the steady-state window samples/s was measured over
    peak_memory_bytes: int | None = None
    error: str = ""
    note: str = ""
    log: str = ""

    @property
    def measured(self) -> bool:
        return self.kind == MEASURED


# The figures that get a median and a range over the rounds.
TIMED_FIGURES = ("wall_s", "first_step_s", "samples_per_s", "peak_memory_bytes")


@dataclass
class Row:
    method: str
    summary: str
    kind: str
    precision: str
    processes: int
    notes: list[str] = field(default_factory=list)
    figures: Figures | None = None
    dev: dict[str, float] | None = None
    parity: float | None = None
    parity_differs: bool = False
    departs_at_step: int | None = None  # full precision: first step beyond the tolerance, over the whole run
    leaves_single: bool = False  # full precision: left single's path by more than the reference pair allows
    speedup: float | None = None
    error: str = ""
    command: list[str] = field(default_factory=list)
    log: str = ""
    runs: list[Run] = field(default_factory=list)
    spreads: dict[str, Spread] = field(default_factory=dict)  # TIMED_FIGURES over the measured runs
    verdict: str | None = None  # against the baseline: faster, slower, indistinguishable, baseline, one run
    vs_baseline: Spread | None = None  # samples/s over the baseline's in the same round: median and range

    @property
    def measured(self) -> bool:
        return self.kind == MEASURED

    @property
    def same_training(self) -> bool:
        """False when the row's losses say it trained something other than ``single``: beyond the parity
        tolerance over the first steps, or beyond the reference pair's drift later on."""
        return not (self.parity_differs or self.leaves_single)

    @property
    def measured_runs(self) -> list[Run]:
        return [run for run in self.runs if run.measured]

    def summarize(self) -> None:
        """The row's kind and spreads from its runs: measured when any run was."""
        measured = self.measured_runs
        if measured:
            self.kind, self.error = MEASURED, ""
            self.spreads = {name: Spread.of(getattr(run, name) for run in measured) for name in TIMED_FIGURES}
        elif self.runs:
            self.kind, self.error = self.runs[-1].kind, self.runs[-1].error


@dataclass
class BenchResult:
    settings: dict[str, Any]
    machine: dict[str, Any]
    command: list[str]
    date: str
    rows: list[Row]

    @property
    def metric(self) -> str:
        return self.settings["metric"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row.kind] = counts.get(row.kind, 0) + 1
        return counts
