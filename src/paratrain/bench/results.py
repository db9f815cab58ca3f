"""One row per method and the whole benchmark's result, as the reports read them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from paratrain.bench.figures import Figures

# What a row is: trained and measured; started but crashed; started but ran past --timeout;
# could not start (library or launcher missing). A row always says which, and why.
MEASURED, FAILED, TIMED_OUT, NOT_INSTALLED = "measured", "failed", "timed out", "not installed"


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
    speedup: float | None = None
    error: str = ""
    command: list[str] = field(default_factory=list)
    log: str = ""

    @property
    def measured(self) -> bool:
        return self.kind == MEASURED


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
