"""``FitResult``: what a finished fit reports, on every rank, and in ``OUT/summary.json``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paratrain.no_follow import open_text

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class FitResult:
    task: str
    steps: int  # optimizer steps done in all, including those before a resume
    epochs_done: float  # steps / steps per epoch
    resumed_from_step: int  # 0 for a fresh start
    seconds: float  # wall time of this run (since resume)
    samples_per_s: float  # training samples per second, all ranks together, this run
    world_size: int
    metric: str
    best_metrics: dict[str, float] = field(default_factory=dict)
    best_step: int = -1
    last_metrics: dict[str, float] = field(default_factory=dict)
    checkpoint_dir: str | None = None
    best_checkpoint: str | None = None
    stopped_early: bool = False
    sync_batchnorm: bool = False
    strategy: str = ""
    precision: str = ""
    report: str = ""  # the last evaluation's report for people, on rank 0 (the others never format it)
    # Ranks that were >= 10 % slower than the median for 3+ log intervals (paratrain.diagnostics.stragglers).
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    #: where the run's wall time went, summed over its attempts (paratrain.goodput.accounting), on rank 0
    goodput: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary_lines(self) -> list[str]:
        """The closing lines printed on rank 0."""
        best = " ".join(f"{k} {v:.4f}" for k, v in self.best_metrics.items() if isinstance(v, float) and k != "samples")
        lines = [
            f"done: {self.steps} steps ({self.epochs_done:.2f} epochs) on {self.world_size} process(es) in "
            f"{self.seconds:.1f}s, {self.samples_per_s:.1f} samples/s"
            + (f", resumed from step {self.resumed_from_step}" if self.resumed_from_step else "")
            + (", stopped early" if self.stopped_early else ""),
        ]
        if self.best_metrics:
            lines.append(f"best dev {self.metric} at step {self.best_step}: {best}")
        if self.best_checkpoint or self.checkpoint_dir:
            lines.append(f"checkpoints: {self.checkpoint_dir}" + (f" (best: {self.best_checkpoint})" if self.best_checkpoint else ""))
        from paratrain.diagnostics.stragglers import summary_line

        lines.extend(summary_line(episode) for episode in self.stragglers)
        return lines

    def save(self, directory: Path) -> Path:
        path = directory / SUMMARY_FILE
        tmp = path.with_suffix(".json.tmp")
        with open_text(tmp, "w", encoding="utf-8") as handle:  # never through a planted link
            handle.write(json.dumps(self.to_dict(), ensure_ascii=False, indent=1))
        tmp.replace(path)
        return path
