"""CSV: ``OUT/metrics.csv``, one row per step and a column per metric; a resumed run drops the rows after its step."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from paratrain.trackers.api import RunInfo, Tracker, register

FILE = "metrics.csv"


@register
class CsvTracker(Tracker):
    name = "csv"
    rewinds = True
    files = (FILE,)

    def open(self, run: RunInfo) -> str | None:
        self._path = Path(run.directory) / FILE
        self._rows: list[dict[str, Any]] = []
        if self._path.is_file():
            with open(self._path, newline="", encoding="utf-8") as handle:
                self._rows = [row for row in csv.DictReader(handle)
                              if run.purge_from is None or int(row.get("step") or 0) < run.purge_from]
        self._columns = list(dict.fromkeys(k for row in self._rows for k in row)) or ["step"]
        self._rewrite()
        return None

    def log(self, metrics: dict[str, float], step: int) -> None:
        same_step = bool(self._rows) and str(self._rows[-1].get("step")) == str(step)
        if same_step:  # one row per step: train, eval and checkpoint numbers of a step share it
            self._rows[-1].update(metrics)
        else:
            self._rows.append({"step": step, **metrics})
        new = [k for k in metrics if k not in self._columns]
        self._columns.extend(new)
        if new or same_step:
            self._rewrite()  # one header over every column
        else:
            with open(self._path, "a", newline="", encoding="utf-8") as handle:
                csv.DictWriter(handle, fieldnames=self._columns, restval="").writerow(self._rows[-1])

    def _rewrite(self) -> None:
        hidden = self._path.with_name(f"{FILE}.tmp")
        with open(hidden, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=self._columns, restval="")
            writer.writeheader()
            writer.writerows(self._rows)
        os.replace(hidden, self._path)
