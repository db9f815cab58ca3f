"""Run one method's process tree with a deadline, showing a progress line with its ETA.

The bench never trusts a method to be alive: the tree gets its own session, and on
timeout (or Ctrl-C) every process in it — the launcher and all it started, even
those that moved to a session of their own — is terminated, then killed. The tree
never outlives the bench either: its launcher runs under ``tether.py``, which ends
the tree when the bench dies (even by SIGKILL).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import psutil

from paratrain.bench.record import PROGRESS_FILE

TETHER = Path(__file__).resolve().with_name("tether.py")
LOG_FILE = "output.log"
POLL_S = 0.25
GRACE_S = 3.0
QUIET_REPORT_S = 15.0  # without a terminal: a progress line this often


@dataclass(frozen=True)
class RunOutcome:
    """How a method's process tree ended. ``status``: ``finished``, ``failed`` or ``timed out``."""

    status: str
    started: float  # time.time() when the launcher was started
    wall_s: float
    returncode: int | None
    error: str = ""
    log: str = ""


class ProgressLine:
    """``[2/11] ddp  step 12/60  14s  ETA 9s`` — rewritten in place on a terminal, every 15 s otherwise."""

    def __init__(self, stream: TextIO, label: str, total_steps: int):
        self.stream = stream
        self.label = label
        self.total = total_steps
        self.tty = stream.isatty()
        self._last_report = 0.0

    def update(self, step: int, elapsed: float, step_s: float | None) -> None:
        if step == 0:
            text = f"{self.label}  starting  {elapsed:.0f}s"
        else:
            eta = f"  ETA {step_s * (self.total - step):.0f}s" if step_s is not None else ""
            text = f"{self.label}  step {step}/{self.total}  {elapsed:.0f}s{eta}"
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r\033[K" + text)
        elif now - self._last_report >= QUIET_REPORT_S:
            self.stream.write(text + "\n")
        else:
            return
        self._last_report = now
        self.stream.flush()

    def done(self, text: str) -> None:
        self.stream.write(("\r\033[K" if self.tty else "") + f"{self.label}  {text}\n")
        self.stream.flush()


def run_tree(argv: list[str], env: dict[str, str], work_dir: Path, timeout_s: float, progress: ProgressLine) -> RunOutcome:
    """Start ``argv`` in ``work_dir`` (output to ``output.log``), wait at most ``timeout_s``.

    Returns the outcome; never raises for the method's own failures.
    """
    log_path = work_dir / LOG_FILE
    started = time.time()
    clock = time.monotonic()
    with log_path.open("wb") as log:
        # The tether's stdin is a pipe only this process holds: when the bench dies, however it
        # dies, the kernel closes it and the tether ends the method's tree.
        process = subprocess.Popen([sys.executable, "-I", str(TETHER), *argv], cwd=work_dir, env=env,
                                   stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while process.poll() is None:
                elapsed = time.monotonic() - clock
                if elapsed > timeout_s:
                    kill_tree(process)
                    return RunOutcome("timed out", started, elapsed, None,
                                      f"timed out after {timeout_s:g}s (--timeout), killed; {_last_step(work_dir)}", str(log_path))
                progress.update(*_progress(work_dir, elapsed))
                time.sleep(POLL_S)
        except BaseException:
            kill_tree(process)
            raise
    wall = time.monotonic() - clock
    kill_tree(process)  # what the launcher left behind (a daemon, a stuck rank) goes too
    if process.returncode != 0:
        return RunOutcome("failed", started, wall, process.returncode, last_error_line(log_path, process.returncode), str(log_path))
    return RunOutcome("finished", started, wall, 0, "", str(log_path))


def _progress(work_dir: Path, elapsed: float) -> tuple[int, float, float | None]:
    state = _read_progress(work_dir)
    step = int(state.get("step", 0))
    first = state.get("first")
    step_s = None
    if step >= 2 and first is not None:
        step_s = (state["time"] - first) / (step - 1)
    return step, elapsed, step_s


def _read_progress(work_dir: Path) -> dict:
    try:
        return json.loads((work_dir / PROGRESS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _last_step(work_dir: Path) -> str:
    step = _read_progress(work_dir).get("step")
    return f"last step reported: {step}" if step else "no step finished"


def kill_tree(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after a grace period, to the process, its session and every descendant."""
    try:
        tree = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in tree if _running(p)]
        if not alive and process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in alive:
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        if sig == signal.SIGTERM:
            psutil.wait_procs(alive, timeout=GRACE_S)
    try:
        process.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    if process.stdin is not None:
        process.stdin.close()  # the tether's signal to end whatever is left


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


_EXCEPTION = re.compile(r"^\s*(?:\[[^\]]*\]<?\w*>?:?\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b.*)$")
# What a process that dies outside Python leaves: the C++ runtime's abort text, Python's fatal error,
# torch elastic's note of the signal that ended a worker.
_CRASH = re.compile(r"(terminate called .*|Fatal Python error: .*|Signal \d+ \(SIG\w+\) received by PID \d+|"
                    r"Segmentation fault.*|.*double free.*|.*corrupted .*)")
_WRAPPERS = ("ChildFailedError", "CalledProcessError", "WorkerError", "LaunchError", "ProcessRaisedException",
             "ProcessExitedException", "SystemExit")


def last_error_line(log_path: Path, returncode: int | None = None) -> str:
    """The line that says what went wrong, in the child's own words: its last exception that is not
    a launcher's wrapper around it (torchrun's ChildFailedError, …); else its crash text (a C++
    abort, a fatal signal); else how the launcher ended (a signal, an exit code) and its last line.
    Never a wrapper's bare name."""
    try:
        lines = [line.strip() for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        lines = []
    lines = [line for line in lines if line]
    found = [m.group(1) for m in map(_EXCEPTION.match, lines) if m]
    own = [line for line in found if not any(wrapper in line.split(":", 1)[0] for wrapper in _WRAPPERS)]
    if own:
        return own[-1][:300]
    crashes = [m.group(1) for m in map(_CRASH.search, lines) if m]
    if crashes:
        # the abort text says why; the signal line only what: the first of them is the child's own
        words = next((c for c in crashes if not c.startswith("Signal ")), crashes[0])
        signals = [c for c in crashes if c.startswith("Signal ")]
        return (words + (f" ({signals[0].split(' received')[0]})" if signals and signals[0] != words else ""))[:300]
    plain = [line for line in lines if not any(wrapper in line for wrapper in _WRAPPERS)
             and not line.startswith(("Traceback", "File ", "=", "-", "^"))]
    ending = _ending(returncode)
    last = plain[-1] if plain else ""
    return "; ".join(filter(None, [ending, last])) [:300] or "exited without output"


def _ending(returncode: int | None) -> str:
    if returncode is None or returncode == 0:
        return ""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"
