"""``Trackers``: rank 0's experiment trackers for one run directory.

It opens the trackers a run names, keeps each one's run id and the last step it was sent in
``OUT/trackers.json``, and hands them the run's numbers. A resumed or restarted run opens the same
tracker runs again; what the failed attempt logged after the resume step is dropped by the trackers that
can (TensorBoard, CSV: they *rewind*), and the append-only ones (MLflow, W&B) are sent each step once —
nothing until the steps they already hold are passed. A missing package, an unreachable server or an
error of a tracker mid-run is one line, and the run goes on without that tracker: a tracker never ends a
training run nor stands between it and its checkpoints.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from paratrain.trackers import available
from paratrain.trackers.api import RunInfo, Tracker

STATE_FILE = "trackers.json"


def _say_on_stderr(text: str) -> None:
    print(f"paratrain: {text}", file=sys.stderr, flush=True)


def tracker_files() -> set[str]:
    """The names the trackers write in a run directory (``paratrain train`` counts them as its own)."""
    return {STATE_FILE, *(name for cls in available().values() for name in cls.files)}


def wants_artifacts(names: Iterable[str]) -> bool:
    """Whether one of the trackers ``names`` stores files (then the run's final weights are written for it)."""
    known = available()
    return any(known[name].has_artifacts for name in names if name in known)


class Trackers:
    """The trackers ``names`` of the run in ``directory``, fed by rank 0. Not collective: on every other
    rank (``is_main=False``) each method does nothing.

    ``open(config, resumed_from)`` starts them; with ``resumed_from=None`` (an own loop that does not say)
    they start at the first :meth:`log`, and a first step not after the last one logged marks a resume there.
    ``say`` prints the one-line notices (default: stderr).
    """

    def __init__(self, names: Iterable[str], directory: str | os.PathLike, is_main: bool = True,
                 say: Callable[[str], None] | None = None, run_name: str | None = None):
        self.names = tuple(names)
        self.directory = Path(directory)
        self.is_main = is_main
        self._say = say or _say_on_stderr
        self._name = run_name or self.directory.resolve().name
        self._open: dict[str, Tracker] = {}
        self._skip_through: dict[str, int] = {}
        self._sent_through: dict[str, int] = {}  # trackers that hold a step only once closed: the last step sent
        self._state: dict[str, dict[str, Any]] = {}
        self._config: dict[str, Any] | None = None
        self._pending = False
        self._state_written = False
        self._state_failure_said = False  # a full disk fails every write: said once

    @property
    def active(self) -> tuple[str, ...]:
        """The trackers that are open and working."""
        return tuple(self._open)

    def open(self, config: dict[str, Any], resumed_from: int | None = None) -> None:
        """Start the trackers with the run's ``config`` (flat: hyperparameters, task, strategy, precision,
        world size); ``resumed_from``: the step this attempt continues from (0: a fresh start)."""
        if not self.is_main or not self.names:
            return
        self._config = {k: _plain(v) for k, v in config.items()}
        self._state = self._read_state()
        if resumed_from is None:
            self._pending = True  # at the first log(), which tells the step
        else:
            self._start(resumed_from + 1)

    def _start(self, first_step: int) -> None:
        self._pending = False
        known = available()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._say(f"no trackers: cannot create {self.directory} ({_reason(exc)})")
            return
        opened: list[str] = []
        for name in self.names:
            cls = known[name]
            if cls.package is not None and importlib.util.find_spec(cls.package) is None:
                self._say(f"{name} is not installed (pip install 'paratrain[{cls.extra}]'); not logging to {name}")
                continue
            earlier = self._state.get(name)
            through = earlier.get("through") if earlier else None
            redone = through is not None and first_step <= through
            tracker = cls()
            run = RunInfo(self.directory, self._name, dict(self._config or {}),
                          run_id=earlier.get("id") if earlier else None,
                          purge_from=first_step if redone and cls.rewinds else None)
            try:
                run_id = tracker.open(run)
            except Exception as exc:  # noqa: BLE001 - any failure of a tracker is its own, said once
                self._say(f"{name} could not start ({_reason(exc)}); training goes on without it")
                continue
            self._open[name] = tracker
            self._skip_through[name] = through if redone and not cls.rewinds else -1
            self._state[name] = {"id": run_id, "through": through if redone and not cls.rewinds else None}
            where = getattr(tracker, "where", None)
            opened.append(f"{name} ({'run ' + run_id + ', ' if run_id else ''}{where})" if where else
                          f"{name}{' run ' + run_id if run_id else ''}")
        self._write_state()
        if opened:
            self._say("logging to " + ", ".join(opened))

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Numbers at ``step`` to every open tracker (non-numbers are left out)."""
        if not self.is_main:
            return
        if self._pending:
            earlier = [entry.get("through") for entry in self._state.values() if entry.get("through") is not None]
            self._start(step if earlier and step <= max(earlier) else 0)
        numbers = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if not numbers or not self._open:
            return
        for name, tracker in list(self._open.items()):
            if step <= self._skip_through[name]:
                continue  # sent by the failed attempt: an append-only tracker gets each step once
            if self._call(name, "logging", tracker.log, numbers, step):
                if tracker.holds_on_log:
                    self._hold(name, step)
                else:
                    self._sent_through[name] = max(step, self._sent_through.get(name, step))
        self._write_state()

    def _hold(self, name: str, step: int) -> None:
        """The tracker ``name`` holds every step through ``step`` (what a later attempt will not send again)."""
        entry = self._state[name]
        entry["through"] = max(step, entry.get("through") or step)

    def summary(self, values: dict[str, Any], step: int) -> None:
        """The run's closing numbers and words."""
        if self.is_main and self._pending:
            self._start(0)
        for name, tracker in list(self._open.items()):
            self._call(name, "the summary", tracker.summary, {k: _plain(v) for k, v in values.items()}, step)

    def artifact(self, path: str | os.PathLike) -> None:
        """Store the file ``path`` (the final weights) with every tracker that stores files."""
        for name, tracker in list(self._open.items()):
            if tracker.has_artifacts:
                self._call(name, f"storing {Path(path).name}", tracker.artifact, Path(path))

    def close(self, failed: bool = False) -> None:
        """End every tracker's run (``failed``: the training raised). Idempotent.

        A SIGTERM or SIGINT that arrives meanwhile waits until the trackers are closed, then acts as it
        would have: a failed rank is closing its trackers when the launcher stops the group, and W&B keeps
        nothing of a run whose close was cut short."""
        if not self._open:
            return
        with _stop_signals_deferred():
            for name, tracker in list(self._open.items()):
                if self._call(name, "closing", tracker.close, failed) and name in self._sent_through:
                    self._hold(name, self._sent_through.pop(name))
            self._write_state()
            self._open.clear()

    def forget(self) -> None:
        """Let every tracker go without another write (its files lived in the run directory, which is gone:
        closing would flush them and make the directory again)."""
        self._open.clear()

    def _call(self, name: str, what: str, method: Callable[..., Any], *args: Any) -> bool:
        try:
            method(*args)
            return True
        except Exception as exc:  # noqa: BLE001 - a tracker's failure never ends the training
            self._say(f"{name}: {what} failed ({_reason(exc)}); not logging to {name} for the rest of this run")
            self._open.pop(name, None)
            return False

    # ---- OUT/trackers.json: each tracker's run id and the last step it was sent -----------------
    def _read_state(self) -> dict[str, dict[str, Any]]:
        try:
            fd = os.open(self.directory / STATE_FILE, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, encoding="utf-8") as handle:
                state = json.load(handle)
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in state.items() if isinstance(v, dict)} if isinstance(state, dict) else {}

    def _write_state(self) -> None:
        hidden = self.directory / f"{STATE_FILE}.tmp"
        try:
            if not self._state_written:  # an own loop's first log may come before its folder exists; a folder
                self.directory.mkdir(parents=True, exist_ok=True)  # deleted mid-run is not made again
            fd = os.open(hidden, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self._state, handle)
            os.replace(hidden, self.directory / STATE_FILE)
            self._state_written = True
        except OSError as exc:
            if not self._state_failure_said:  # tried again at every log step; said once
                self._state_failure_said = True
                self._say(f"could not keep the trackers' run ids in {self.directory / STATE_FILE} ({_reason(exc)})")


@contextlib.contextmanager
def _stop_signals_deferred() -> Iterator[None]:
    """SIGTERM and SIGINT are held while the block runs (main thread only), then raised again with the
    handlers of before. (The launcher sends SIGKILL after its grace period: a block that hangs still ends.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: received.append(signum))
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:700]}" if text else type(exc).__name__


def _plain(value: Any) -> Any:
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return json.dumps(value, default=str) if isinstance(value, (dict, list, tuple)) else str(value)
