"""Where the fit loop's words and numbers go.

* the console: rank 0 only, lines like a hand-written BERT fine-tuning loop's
  (``epoch 1/2 step 120/288 loss 0.41``), written through the progress bar so the bar stays intact;
* ``OUT/logs/rank<R>.log``: every rank's own lines (its local loss, its timings,
  its warnings) — the first place to look when one rank misbehaves;
* ``OUT/metrics.jsonl``: rank 0, one JSON object per event (train, eval,
  checkpoint, resume, summary), appended across resumed runs; every run of the command
  (an *attempt*) starts with an ``attempt`` record: its number and how the previous
  attempt ended; a ``resume`` record names the step it continues from. Its records
  supersede the earlier attempts' records after that step (:func:`latest_attempt`);
* the experiment trackers (``paratrain.trackers``): TensorBoard under ``OUT/tensorboard/`` when
  installed, and those ``log_with`` names (csv, mlflow, wandb, …) — the same numbers, rank 0 only; a
  resumed attempt continues their runs, each step once (``OUT/trackers.json``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from paratrain.no_follow import open_fd, open_text
from paratrain.trackers.hub import Trackers

LOG_DIR = "logs"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"  # written by paratrain.trackers.tensorboard_files


def _plain(value: Any) -> Any:
    """JSON-safe numbers: NaN/inf become None (strict JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


class RunLog:
    """Console, per-rank file, JSONL and TensorBoard output of one rank. Not collective."""

    def __init__(self, out_dir: Path | None, rank: int, tensorboard: bool | None = None,
                 log_with: tuple[str, ...] = ()):
        self.rank = rank
        self.is_main = rank == 0
        self.bar: Any = None  # the progress bar, once the loop has one (console lines go through it)
        self._file = None
        self._metrics = None
        self._out_dir = out_dir
        self._summarised = False
        self.trackers = Trackers(tracker_names(tensorboard, log_with), out_dir or ".",
                                 is_main=self.is_main and out_dir is not None, say=self.console)
        self.attempt = 1  # this run's number among the runs of the command in out_dir (start_attempt)
        if out_dir is None:
            return
        (out_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        # Open for the whole run (line-buffered, so a killed run keeps its lines); close() closes them.
        # Never through a planted link (paratrain.no_follow): refused in one line instead.
        self._file = open_text(out_dir / LOG_DIR / f"rank{rank}.log", "a", encoding="utf-8", buffering=1)
        if self.is_main:
            self._metrics = open_text(out_dir / METRICS_FILE, "a", encoding="utf-8", buffering=1)

    def start_attempt(self) -> None:
        """Mark a new attempt in ``metrics.jsonl`` (rank 0), before anything else of it can fail:
        its number and how the previous one ended; keep the previous attempt's failure report
        (moved to ``failures/``)."""
        if not self.is_main or self._out_dir is None:
            return
        from paratrain.diagnostics.failure_report import archive_failure

        previous = read_records(self._out_dir / METRICS_FILE)
        self.attempt = 1 + sum(1 for record in previous if record.get("event") == "attempt")
        values: dict[str, Any] = {"attempt": self.attempt}
        if self.attempt > 1:
            values["previous_attempt"] = _how_it_ended(previous, self._out_dir)
            self.file(f"attempt {self.attempt}; the previous attempt {values['previous_attempt']}")
        kept = archive_failure(self._out_dir)
        if kept is not None:
            values["previous_failure_report"] = str(kept)
        self.record("attempt", 0, **values)

    def open_trackers(self, resumed_from: int, config: dict[str, Any]) -> None:
        """The experiment trackers for this attempt (rank 0), with the run's ``config``; a later attempt
        continues their runs from the step it resumed from (0: a fresh start)."""
        self.trackers.open(config, resumed_from)

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
        """A line in this rank's own log file only.

        Raises:
            CheckpointError: the line cannot be written (a full disk between saves): names the file and the fix.
        """
        if self._file is not None:
            try:
                self._file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} rank {self.rank}: {text}\n")
            except OSError as exc:
                handle, self._file = self._file, None
                raise self._write_failed(exc, handle, self._out_dir / LOG_DIR / f"rank{self.rank}.log") from None

    def warning(self, text: str) -> None:
        """A warning from any rank: its log file and its stderr, tagged with the rank."""
        self.file(f"WARNING {text}")
        print(f"[rank {self.rank}] warning: {text}", file=sys.stderr, flush=True)

    # ---- numbers --------------------------------------------------------------------------
    def record(self, event: str, step: int, **values: Any) -> None:
        """One JSON line (rank 0), and the numbers as ``event/name`` to the trackers (the summary as theirs)."""
        if not self.is_main:
            return
        if self._metrics is not None:
            line = {"event": event, "step": step, "time": round(time.time(), 3), **_plain(values)}
            try:
                self._metrics.write(json.dumps(line, ensure_ascii=False) + "\n")
            except OSError as exc:
                metrics, self._metrics = self._metrics, None
                raise self._write_failed(exc, metrics, self._out_dir / METRICS_FILE) from None
        if event == "summary":
            self.trackers.summary(values, step)
            self._summarised = True
        else:
            self.trackers.log({f"{event}/{name}": value for name, value in values.items()}, step)

    @staticmethod
    def _write_failed(exc: OSError, handle: Any, path: Path) -> Exception:
        """The one-line error for a file of the run that could not be written (a full disk between saves,
        not a traceback); ``handle`` is closed quietly (its buffered line would fail again)."""
        from paratrain.checkpoint.files import describe_os_error
        from paratrain.errors import CheckpointError

        with contextlib.suppress(OSError):
            handle.close()
        named = OSError(exc.errno, exc.strerror or str(exc), str(path))
        return CheckpointError(describe_os_error(named, "cannot write")
                               + "; then run the same command to resume from the newest checkpoint")

    def close(self) -> None:
        """Close the files and end the trackers' runs (failed, unless the summary was recorded)."""
        self.trackers.close(failed=not self._summarised)
        for handle in (self._file, self._metrics):
            if handle is not None:
                with contextlib.suppress(OSError):  # a full disk: the run's own error says so
                    handle.close()
        self._file = self._metrics = None


def tracker_names(tensorboard: bool | None, log_with: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The trackers a run feeds: ``log_with``, with TensorBoard first unless ``tensorboard`` is False (``None``:
    when the tensorboard package is installed; ``True``: asked for, its absence said at start-up)."""
    names = [name for name in log_with if name != "tensorboard" or tensorboard is not False]
    if "tensorboard" not in names and (tensorboard or (tensorboard is None and importlib.util.find_spec("tensorboard"))):
        names.insert(0, "tensorboard")
    return tuple(names)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON records of a ``metrics.jsonl`` (a line cut short by a kill, or with a damaged byte, is skipped).

    Raises:
        ConfigError: ``path`` is a symbolic link or not a regular file.
    """
    records: list[dict[str, Any]] = []
    try:
        with open(open_fd(path, os.O_RDONLY), "rb") as handle:  # never through a planted link
            lines = handle.read().splitlines()
    except OSError:
        return records
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:  # also a line with a byte that is not UTF-8: skipped like a cut one
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def latest_attempt(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's history as its latest attempts tell it. An attempt redoes the steps after the one
    it resumed from (its ``resume`` record; none: step 0), so the earlier attempts' records of those
    steps are dropped. One curve, no zig-zag."""
    kept: list[dict[str, Any]] = []
    cut: int | None = None  # the step the attempt that just began continues from
    for record in records:
        event = record.get("event")
        if event == "attempt":
            cut = 0
        elif event == "resume" and cut is not None:
            cut = int(record.get("step") or 0)
        elif cut is not None:
            kept = [r for r in kept if r.get("event") in ("attempt", "resume") or (r.get("step") or 0) <= cut]
            cut = None
        kept.append(record)
    return kept


def _how_it_ended(previous: list[dict[str, Any]], out_dir: Path) -> str:
    """How the attempt before this one ended, as far as the run directory tells."""
    try:
        summary = json.loads((out_dir / "failure.json").read_text()).get("summary", "")
        return f"failed: {summary}"[:500]
    except (OSError, ValueError, AttributeError):
        pass
    events = [r for r in previous if r.get("event") != "attempt"]
    if not events:
        return "ended before its first record"
    last = events[-1]
    if last.get("event") == "summary":
        return f"finished at step {last.get('step')}"
    return f"stopped after step {last.get('step')} without a report (killed, preempted or its node lost)"
