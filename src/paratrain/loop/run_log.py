"""Where the fit loop's words and numbers go.

* the console: rank 0 only, lines in seed 003's spirit (``epoch 1/2 step 120/288 loss 0.41``),
  written through the progress bar so the bar stays intact;
* ``OUT/logs/rank<R>.log``: every rank's own lines (its local loss, its timings,
  its warnings) — the first place to look when one rank misbehaves;
* ``OUT/metrics.jsonl``: rank 0, one JSON object per event (train, eval,
  checkpoint, resume, summary), appended across resumed runs;
* ``OUT/tensorboard/``: the same scalars for TensorBoard, when installed.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from paratrain.errors import require

LOG_DIR = "logs"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


def _plain(value: Any) -> Any:
    """JSON-safe numbers: NaN/inf become None (strict JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


class RunLog:
    """Console, per-rank file, JSONL and TensorBoard output of one rank. Not collective."""

    def __init__(self, out_dir: Path | None, rank: int, tensorboard: bool | None = None):
        self.rank = rank
        self.is_main = rank == 0
        self.bar: Any = None  # the progress bar, once the loop has one (console lines go through it)
        self._file = None
        self._metrics = None
        self._tensorboard = None
        if out_dir is None:
            return
        (out_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        # Open for the whole run (line-buffered, so a killed run keeps its lines); close() closes them.
        self._file = open(out_dir / LOG_DIR / f"rank{rank}.log", "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        if self.is_main:
            self._metrics = open(out_dir / METRICS_FILE, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            self._tensorboard = self._open_tensorboard(out_dir / TENSORBOARD_DIR, tensorboard)

    @staticmethod
    def _open_tensorboard(directory: Path, wanted: bool | None):
        if wanted is False:
            return None
        if wanted is None:
            try:
                import tensorboard  # noqa: F401 - only probing whether it is installed
            except ImportError:
                return None
        else:
            require("tensorboard", "logging", "TensorBoard logging")
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=str(directory))

    # ---- words ----------------------------------------------------------------------------
    def console(self, text: str) -> None:
        """A line on rank 0's console (and in its log file)."""
        self.file(text)
        if not self.is_main:
            return
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def file(self, text: str) -> None:
        """A line in this rank's own log file only."""
        if self._file is not None:
            self._file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} rank {self.rank}: {text}\n")

    def warning(self, text: str) -> None:
        """A warning from any rank: its log file and its stderr, tagged with the rank."""
        self.file(f"WARNING {text}")
        print(f"[rank {self.rank}] warning: {text}", file=sys.stderr, flush=True)

    # ---- numbers --------------------------------------------------------------------------
    def record(self, event: str, step: int, **values: Any) -> None:
        """One JSON line (rank 0) and TensorBoard scalars ``event/name`` for the numbers."""
        if not self.is_main:
            return
        if self._metrics is not None:
            line = {"event": event, "step": step, "time": round(time.time(), 3), **_plain(values)}
            self._metrics.write(json.dumps(line, ensure_ascii=False) + "\n")
        if self._tensorboard is not None:
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tensorboard.add_scalar(f"{event}/{name}", value, step)

    def close(self) -> None:
        for handle in (self._file, self._metrics):
            if handle is not None:
                handle.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        self._file = self._metrics = self._tensorboard = None
