"""Rank 0's ledger of one attempt: every second from launch to the end, in one category.

The categories (:data:`CATEGORIES`):

* ``startup`` — launch (the launcher's start, or this process's after a restart) → the first step done:
  importing torch, the rendezvous, building the model, loading the checkpoint, the first step;
* ``train`` — steps trained for the first time;
* ``redone`` — steps trained again: a resumed attempt redoes the steps an earlier attempt trained
  after its last checkpoint;
* ``save`` — the time a save blocks training (with background saves: the snapshot to host memory,
  and waiting for the previous write when it has not finished);
* ``eval`` — evaluation;
* ``rest`` — the loop between a step and a save or evaluation, and the end of the attempt after its
  last step;
* ``recovery`` — between attempts (:mod:`.accounting`: from the last record of one attempt to the
  launch of the next), and a failed attempt's last moments after its last record.

The clock is ``time.time()`` (one clock for all attempts and the launcher; the accounting compares
the attempts' ends with the next ones' starts). A span is closed at each boundary — a step done
(:func:`step_done`), a phase entered or left (:func:`phase`) — and the running totals are appended
to ``goodput.jsonl`` about once a second (:data:`FLUSH_S`) and at every phase's end, so a killed
attempt loses at most that much to ``recovery``. Each step costs two clock reads and an addition.

Only rank 0 keeps one; on other ranks, and before a :class:`~paratrain.Checkpointer` opened it,
:func:`step_done` and :func:`phase` do nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from paratrain import no_follow
from paratrain.errors import ParatrainError

CATEGORIES = ("startup", "train", "redone", "save", "eval", "rest", "recovery")
LEDGER_FILE = "goodput.jsonl"
#: the launcher's start (``time.time()``), exported by ``paratrain run``/``train`` to the workers
LAUNCH_TIME_ENV = "PARATRAIN_LAUNCH_TIME"
FLUSH_S = 1.0


def process_start_time(pid: int | str = "self") -> float | None:
    """When process ``pid`` started, on ``time.time()``'s clock (Linux ``/proc``; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start time in clock ticks after boot
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


#: When the worker process torch's agent started began, where this process is not that one: a warm
#: worker (``paratrain run --warm-workers``), forked by the pool for the process the agent started, sets
#: that process's start here, so its start-up is counted from the same moment as a cold worker's.
worker_started: float | None = None


def worker_start_time() -> float | None:
    """When this worker started: :data:`worker_started`, else this process's start."""
    return worker_started or process_start_time()


def launch_time() -> float:
    """The launcher's start (``PARATRAIN_LAUNCH_TIME``), else this worker's start, else now."""
    try:
        return float(os.environ[LAUNCH_TIME_ENV])
    except (KeyError, ValueError):
        return worker_start_time() or time.time()


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a ``goodput.jsonl`` (a line cut short by a kill is skipped)."""
    records = []
    try:
        with no_follow.open_text(path, "r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except (OSError, ParatrainError):
        pass
    return records


def open_for_append(path: Path) -> Any:
    """``path`` opened to append lines (line-buffered: a killed process keeps its lines), never through a
    symbolic link planted in its place (:mod:`paratrain.no_follow`).

    Raises:
        OSError: it cannot be opened, or is a link or not a regular file.
    """
    try:
        return no_follow.open_text(path, "a", encoding="utf-8", buffering=1)
    except ParatrainError as exc:
        raise OSError(str(exc)) from exc


def append_record(path: Path, record: dict[str, Any]) -> None:
    """One line appended to ``path`` (the launcher's end record; the ledger keeps its file open)."""
    try:
        with open_for_append(path) as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError:
        pass


class Ledger:
    """The clock of this attempt, kept by rank 0 in ``directory/goodput.jsonl``. Not collective.

    Opening it starts the attempt: its number, where it starts counting (``origin``: the launch
    when it came after the previous attempt's last record, else this process's start — a restart
    by the launcher's agent), the previous attempts' end and highest step (steps up to that one
    are ``redone``).
    """

    def __init__(self, directory: Path):
        self.path = Path(directory) / LEDGER_FILE
        previous = read_records(self.path)
        self.previous = previous  # the earlier attempts' records (their failures, their saves' costs)
        self.attempt = 1 + sum(1 for r in previous if r.get("event") == "attempt")
        times = [float(r["time"]) for r in previous if isinstance(r.get("time"), (int, float))]
        prev_end = max(times) if times else None
        self.prev_max_step = max((int(r.get("step") or 0) for r in previous if r.get("event") == "ledger"), default=0)
        launch = launch_time()
        origin = launch if prev_end is None or launch > prev_end else (worker_start_time() or launch)
        if prev_end is not None:
            origin = max(origin, prev_end)
        now = time.time()
        self.origin = min(origin, now)
        self.totals = dict.fromkeys(CATEGORIES, 0.0)
        self.step = 0
        self.stepped = False  # a step was done in this attempt: the start-up is over
        self.first_step_at = self.origin
        self.timed_steps = 0  # steps after the first one, and their seconds (the mean step time)
        self.timed_seconds = 0.0
        self.redone_until: float | None = None  # when this attempt passed the previous attempts' highest step
        self._since = self.origin
        self._phase: str | None = None
        self._flushed = now
        self._file: Any = None  # opened once the directory exists (a fresh run's first save makes it)
        self._waiting: list[str] = []  # lines written before that
        self._open = True
        self._worth = False  # something of this attempt is worth a record (see _write)
        self._write({"event": "attempt", "attempt": self.attempt, "time": now, "origin": self.origin,
                     "launch": launch, "process_start": worker_start_time(), "pid": os.getpid(),
                     "prev_end": prev_end, "prev_max_step": self.prev_max_step})

    # ---- boundaries --------------------------------------------------------------------------
    def step_done(self) -> None:
        """One optimizer step ended: the span since the last boundary was this step."""
        now = time.time()
        self.step += 1
        if not self.stepped:
            category = "startup"
            self.stepped = True
            self.first_step_at = now
        elif self.step <= self.prev_max_step:
            category = "redone"
        else:
            category = "train"
            if self.redone_until is None and self.prev_max_step:
                self.redone_until = now
                self.event("redone", start=self.first_step_at, end=now, to_step=self.prev_max_step)
        if category != "startup":
            self.timed_steps += 1
            self.timed_seconds += now - self._since
        self.totals[category] += now - self._since
        self._since = now
        if now - self._flushed >= FLUSH_S:
            self.flush(now)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[dict[str, Any]]:
        """Time spent inside is ``name`` (``save``, ``eval``); a record names its start and end.
        Nested phases count to the outer one. Yields a dict whose items go into the record."""
        if self._phase is not None:
            yield {}
            return
        start = time.time()
        self._close(start, "rest" if self.stepped else "startup")
        self._phase = name
        extra: dict[str, Any] = {}
        try:
            yield extra
        finally:
            end = time.time()
            self._close(end, name)
            self._phase = None
            self.event(name, start=start, end=end, step=self.step, **extra)
            self.flush(end)

    def within_step(self, category: str, seconds: float) -> None:
        """The last ``seconds`` of the running span were ``category``, not the step they fall in (a wait inside
        the optimizer's step for a background save's copy): counted there, and left out of the step's time."""
        seconds = max(0.0, min(seconds, time.time() - self._since))
        self.totals[category] += seconds
        self._since += seconds

    def steps_clock(self) -> tuple[float, int]:
        """``(seconds, steps)`` of this attempt's timed steps so far; two readings give the mean step between
        them. Any thread (a background write reads it as it ends)."""
        return self.timed_seconds, self.timed_steps

    def step_seconds(self) -> float | None:
        """The mean time of this attempt's steps after the first one (None before the second)."""
        return self.timed_seconds / self.timed_steps if self.timed_steps else None

    def set_step(self, step: int | None) -> None:
        """The loop's own step count (a resume, a save): steps are counted on from it."""
        if step is not None:
            self.step = int(step)

    # ---- records -----------------------------------------------------------------------------
    def event(self, kind: str, **values: Any) -> None:
        """One record of ``kind`` (``save``, ``eval``, ``written``, ``redone``) in this attempt."""
        self._write({"event": kind, "attempt": self.attempt, "time": time.time(), **values})

    def flush(self, now: float | None = None, ended: bool = False) -> None:
        """The running totals of this attempt up to now, as one record."""
        now = time.time() if now is None else now
        if self._phase is None:
            self._close(now, ("rest" if ended else "train") if self.stepped else "startup")
        self._flushed = now
        record = {"event": "ledger", "attempt": self.attempt, "time": now, "step": self.step,
                  "timed_steps": self.timed_steps, "seconds": {k: round(v, 4) for k, v in self.totals.items() if v}}
        if ended:
            record["ended"] = True
        self._write(record)

    def close(self, ended: bool = True) -> None:
        """The attempt's last record: ``ended`` when its last step and save are done (False: it failed)."""
        if not self._open:
            return
        self.flush(ended=ended)
        self._open = False
        if self._file is not None:
            self._file.close()
            self._file = None

    def _close(self, now: float, category: str) -> None:
        if category == "train" and self.step + 1 <= self.prev_max_step:  # the running span is the next step's
            category = "redone"
        self.totals[category] += now - self._since
        self._since = now

    def _write(self, record: dict[str, Any]) -> None:
        if not self._open:
            return
        line = json.dumps(record) + "\n"
        # An attempt that neither steps nor saves (a refused resume, a rerun of a finished run) writes nothing:
        # its lines wait until the first step or save, and are dropped with it otherwise.
        self._worth = self._worth or self.stepped or record.get("event") in ("save", "written", "eval")
        if not self._worth:
            if len(self._waiting) < 100_000:
                self._waiting.append(line)
            return
        if self._file is None:
            try:
                exists = self.path.parent.is_dir()
            except OSError:  # the ledger never fails what it measures
                exists = False
            if not exists:
                if len(self._waiting) < 100_000:
                    self._waiting.append(line)
                return
            try:
                self._file = open_for_append(self.path)
            except OSError:
                self._open = False
                return
            line = "".join(self._waiting) + line
            self._waiting = []
        try:
            self._file.write(line)
        except (OSError, ValueError):
            pass


_active: Ledger | None = None
_failed = False
_hooked = False


def open_ledger(directory: Path) -> Ledger:
    """Start this process's ledger in ``directory`` (rank 0, by the Checkpointer that holds it); an
    open one of the same directory is kept, one of another directory is closed first."""
    global _active, _hooked
    if _active is not None and _active.path.parent != Path(directory):
        close_ledger()
    if _active is None:
        _active = Ledger(directory)
    if not _hooked:  # once per process: close at exit, and tell an exit by an uncaught exception
        _hooked = True
        import atexit
        import sys

        atexit.register(lambda: close_ledger(ended=not _failed))
        previous_hook = sys.excepthook

        def note_failure(*exc_info: Any) -> None:  # an uncaught exception: the attempt failed
            global _failed
            _failed = True
            previous_hook(*exc_info)

        sys.excepthook = note_failure
    return _active


def close_ledger_of(directory: Path) -> None:
    """Close the ledger kept in ``directory``, if it is the open one (its Checkpointer closed)."""
    if _active is not None and _active.path.parent == Path(directory):
        close_ledger()


def active() -> Ledger | None:
    return _active


def close_ledger(ended: bool = True) -> None:
    """Close this process's ledger (at exit: as ended; a failed fit closes it with ``ended=False``)."""
    global _active
    if _active is not None:
        _active.close(ended)
        _active = None


def step_done() -> None:
    """An optimizer step ended (``rt.step``); nothing without an open ledger."""
    if _active is not None:
        _active.step_done()


def steps_clock() -> tuple[float, int] | None:
    """See :meth:`Ledger.steps_clock`; None without an open ledger."""
    active = _active
    return active.steps_clock() if active is not None else None


def within_step(category: str, seconds: float) -> None:
    """See :meth:`Ledger.within_step`; nothing without an open ledger."""
    if _active is not None:
        _active.within_step(category, seconds)


@contextlib.contextmanager
def phase(name: str) -> Iterator[dict[str, Any]]:
    """Time inside counts as ``name``; nothing without an open ledger."""
    if _active is None:
        yield {}
        return
    with _active.phase(name) as extra:
        yield extra
