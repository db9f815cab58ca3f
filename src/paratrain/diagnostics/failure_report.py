"""What happened to a failed job, rank by rank: the facts, one summary line, and ``failure.json``.

Built by the launcher from torch elastic's failure records (``ProcessFailure``: exit code,
pid, the error file a worker wrote through ``@record`` / the ErrorHandler). The rank that
failed *first* is the cause; ranks that ended after it are consequences, and ranks the
agent stopped (SIGTERM, then SIGKILL after its grace period) did not fail at all.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paratrain.diagnostics.stacks import describe_frames, frames_wait, main_thread_in_dump
from paratrain.env.machine import machine_label

FAILURE_FILE = "failure.json"  # the newest failed attempt's report, in the run directory
FAILURES_DIR = "failures"  # earlier attempts' reports, kept when a rerun starts

# Errors a rank gets when a *peer* is gone or late: consequences, never the cause.
_PEER_LOST = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|Timed out waiting|timed out|recvBytes|"
    r"DistNetworkError|ECONNRESET|NCCL communicator was aborted|Socket Timeout|op\.preamble",
    re.IGNORECASE,
)
_OOM_CGROUP_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
STOPPED_BY_AGENT = (signal.SIGTERM, signal.SIGKILL)


@dataclass
class RankOutcome:
    """How one rank ended."""

    rank: int
    local_rank: int
    pid: int
    host: str
    exitcode: int
    signal: str | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    last_frames: list[str] = field(default_factory=list)
    log: str | None = None
    likely_oom: bool = False
    timestamp: int = 0
    # Its main thread's frames when the launcher stopped it (file, line, function; innermost first).
    stack_at_stop: list[tuple[str, int, str]] = field(default_factory=list)

    @property
    def outside_collective(self) -> bool:
        """Stopped by the launcher while not inside a collective (the others waited for it)."""
        return bool(self.stack_at_stop) and not frames_wait(self.stack_at_stop)

    @property
    def stall_verdict(self) -> bool:
        return bool(self.exception_message and self.exception_message.startswith("stall:"))

    @property
    def peer_lost(self) -> bool:
        return bool(self.exception_message and _PEER_LOST.search(f"{self.exception_type}: {self.exception_message}"))

    @property
    def while_joining(self) -> bool:
        """Its error came from forming the process group (gloo's full mesh, init_process_group)."""
        text = f"{self.exception_message or ''} {' '.join(self.last_frames)}"
        return "connectFullMesh" in text or "init_process_group" in text or "_new_process_group_helper" in text

    @property
    def raised_before_stop(self) -> bool:
        """It raised its own exception and was ending when the launcher's SIGTERM reached it
        (two ranks failing at once: the agent stops the second while it exits)."""
        return self.signal == "SIGTERM" and bool(self.exception_type)

    def how(self, brief: bool = False) -> str:
        """How it ended; ``brief`` cuts the exception message (for ranks that only followed)."""
        if self.raised_before_stop:
            return f"raised {self._exception(brief)} (the launcher stopped it as it exited)"
        if self.signal:
            text = f"was killed by {self.signal}"
            return text + (" (likely the kernel's OOM killer: out of memory)" if self.likely_oom else "")
        text = f"exited with code {self.exitcode}"
        if self.exception_type:
            text += f" after {self._exception(brief)}"
        return text

    def _exception(self, brief: bool) -> str:
        message = (self.exception_message or "").splitlines()[0] if self.exception_message else ""
        if brief and len(message) > 60:
            message = message[:57] + "..."
        return f"{self.exception_type}" + (f": {message}" if message else "")


@dataclass
class FailureReport:
    """The job's failure: the first failed rank, what the others did, where the logs are."""

    first: RankOutcome
    consequences: list[RankOutcome]  # failed after the first one (lost their peer, …)
    stopped: list[int]  # ranks the launcher stopped: not failures
    hint: str = ""
    finished: list[int] = field(default_factory=list)  # ranks of this node that had exited with code 0

    @property
    def refused_by_every_rank(self) -> bool:
        """Every failed rank refused with the same ConfigError (exit 2: a changed batch size on resume, …)."""
        f = self.first
        return (f.exception_type == "ConfigError" and bool(f.exception_message) and not f.signal
                and all(c.exception_type == f.exception_type and c.exception_message == f.exception_message
                        for c in self.consequences))

    def summary(self) -> str:
        """One line, first cause first."""
        f = self.first
        if f.stall_verdict:  # the watchdog's line already names the stalled rank(s) and every other one
            text = f"the watchdog ended the job: {f.exception_message}"
            return text + (f"; rank {f.rank}'s output is in {f.log}" if f.log else "")
        if self.refused_by_every_rank:  # the same refusal on every rank: said once, as the command's own
            return f.exception_message or ""
        if self.finished and f.peer_lost:  # the cause is the rank that left, not the one left waiting
            ranks = ", ".join(map(str, self.finished))
            text = (f"rank{'s' * (len(self.finished) > 1)} {ranks} exited early (code 0) while the others still ran: "
                    f"rank {f.rank} (host {f.host}, pid {f.pid}) then lost {'them' if len(self.finished) > 1 else 'it'} "
                    f"in a collective and {f.how(brief=True)}; every rank must run the same collectives to the end "
                    "(a rank-dependent return or sys.exit, or fewer batches on one rank, leaves the others waiting)")
            return text + (f"; rank {f.rank}'s output is in {f.log}" if f.log else "")
        text = f"rank {f.rank} (local rank {f.local_rank}, host {f.host}, pid {f.pid}) failed first: it {f.how()}"
        if self.consequences:
            after = ", ".join(f"rank {c.rank} {c.how(brief=True)}" for c in self.consequences)
            text += f"; after it, {after}"
        if self.stopped:
            text += f"; rank{'s' * (len(self.stopped) > 1)} {', '.join(map(str, self.stopped))} stopped by the launcher"
        if f.log:
            text += f"; its output is in {f.log}"
        elif f.exception_type:
            text += "; its traceback is above"
        elif f.signal:
            text += " (a killed process prints no traceback; look at its last lines above)"
        if self.hint:
            text += f"; {self.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "first": asdict(self.first),
            "consequences": [asdict(c) for c in self.consequences],
            "stopped_ranks": self.stopped,
            "finished_early_ranks": self.finished,
            "hint": self.hint,
        }

    def save(self, directory: str | Path) -> Path:
        """Write ``failure.json`` in ``directory`` (created if needed); returns its path.

        The report of an earlier attempt there is kept: moved to ``failures/`` first (see
        :func:`archive_failure`)."""
        archive_failure(directory)
        path = Path(directory) / FAILURE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")  # a kill mid-write leaves no half report
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)
        return path


def archive_failure(directory: str | Path) -> Path | None:
    """Move ``DIR/failure.json`` (an earlier attempt's report) to ``DIR/failures/failure-<time>.json``
    and return where, or None when there is none. A rerun of the same command calls it when it
    starts, so the report of an attempt stays readable and never sits beside a later success."""
    current = Path(directory) / FAILURE_FILE
    if not current.is_file():
        return None
    archive = Path(directory) / FAILURES_DIR
    archive.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(current.stat().st_mtime))
    target = archive / f"failure-{stamp}.json"
    suffix = 1
    while target.exists():
        target = archive / f"failure-{stamp}-{suffix}.json"
        suffix += 1
    os.replace(current, target)
    return target


def rank_outcome(
    rank: int, failure: Any, log: str | None, oom_kills_before: int | None, stacks_at_stop: str | None = None
) -> RankOutcome:
    """A :class:`RankOutcome` from torch elastic's ``ProcessFailure`` (and the faulthandler dump
    the worker wrote when the launcher stopped it, if any)."""
    recorded = recorded_exception(failure)
    name = None
    if failure.exitcode < 0:
        try:
            name = signal.Signals(-failure.exitcode).name
        except ValueError:
            name = f"signal {-failure.exitcode}"
    outcome = RankOutcome(
        rank=rank, local_rank=failure.local_rank, pid=failure.pid, host=machine_label(),
        exitcode=failure.exitcode, signal=name, log=log, timestamp=int(failure.timestamp or 0),
    )
    recorded = recorded or (exception_from_log(log) if log else None)
    if recorded:
        outcome.exception_type, message, traceback = recorded
        outcome.exception_message = plain_message(message)
        outcome.last_frames = last_frames(traceback)
    if name == "SIGKILL":
        outcome.likely_oom = oom_killed(failure.pid, oom_kills_before)
    if name == "SIGTERM" and stacks_at_stop:
        outcome.stack_at_stop = main_thread_in_dump(stacks_at_stop)
    return outcome


def build_report(outcomes: list[RankOutcome], hint: str = "") -> FailureReport:
    """Order the outcomes: the cause first, then consequences; agent-stopped ranks apart.

    torch's timestamps are coarse (seconds) and, for a killed process, the moment the
    agent *noticed*, which can be after its peers reported losing it. So the cause is
    a stall verdict first, then a rank that did not merely lose its peer or get the
    agent's SIGTERM, and only then the earliest.
    """

    def blame(o: RankOutcome) -> tuple:
        return (not o.stall_verdict, o.signal == "SIGTERM", o.peer_lost, o.timestamp, o.rank)

    ordered = sorted(outcomes, key=blame)
    first, rest = ordered[0], ordered[1:]
    stopped = sorted(o.rank for o in rest
                     if o.signal in {s.name for s in STOPPED_BY_AGENT} and not o.likely_oom and not o.raised_before_stop)
    consequences = [o for o in rest if o.rank not in stopped]
    outside = [o for o in rest if o.outside_collective]
    if not hint and first.peer_lost and outside:
        hint = "; ".join(
            f"rank {o.rank} (host {o.host}, pid {o.pid}) was not in the collective: when stopped it was in "
            f"{describe_frames(o.stack_at_stop)}" for o in outside
        ) + f" — the collective timed out waiting for {'them' if len(outside) > 1 else 'it'}"
    if not hint and first.peer_lost and first.while_joining:
        hint = ("the ranks could not connect while forming the process group (init_process_group): a peer died "
                "while starting (its log says why), or the address it announced is not reachable from here — on "
                "several nodes set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the interface between them "
                "(paratrain doctor --master-addr … tells)")
    if not hint and first.peer_lost:
        hint = ("this rank lost a peer inside a collective: another rank or host died (its log says why), or "
                "a collective ran on only some ranks — a rank-dependent branch (`if rank == 0:` / "
                "`if rt.is_main:`) around ckpt.save, barrier or all_reduce must run on every rank")
    return FailureReport(first, consequences, stopped, hint)


_SOURCE_PLACE = re.compile(r"^\[[^\]\s]+\.(?:cc|cpp|h|hpp|cu):\d+\]\s*")  # gloo: "[/…/pair.cc:537] "
_SIGN_OFF = re.compile(r"\s*This is typically caused by .*$", re.DOTALL)  # gloo's advice and "GLHF! 🏖️"


def plain_message(message: str | None) -> str | None:
    """A worker's exception message as a line for people: without the C++ source place gloo puts
    first and the sign-off it puts last ("… Check the logs of the remote worker … GLHF!")."""
    if not message:
        return message
    return _SIGN_OFF.sub("", _SOURCE_PLACE.sub("", message.strip())) or message


_PEER_ADDRESS = re.compile(r"\[([0-9A-Fa-f:.]+)\]:\d+")  # gloo: "Read error [10.0.0.2]:61123: Connection reset"


def peer_address(message: str | None) -> str | None:
    """The peer's address in a gloo connection error, if the message names one."""
    found = _PEER_ADDRESS.search(message or "")
    return found.group(1) if found else None


def recorded_exception(failure: Any) -> tuple[str, str, str] | None:
    """(type, message, traceback) from the worker's error file, when it wrote one (``@record``)."""
    data = failure.error_file_data or {}
    message = data.get("message")
    if isinstance(message, str):  # some torch versions store the JSON as a string
        try:
            message = json.loads(message)
        except ValueError:
            return None  # torch's "<NONE>": the worker wrote no error file
    if not isinstance(message, dict) or not message.get("message"):
        return None
    text = str(message["message"])
    traceback = str(message.get("extraInfo", {}).get("py_callstack", ""))
    exc_type, _, detail = text.partition(": ")
    return exc_type.strip(), detail.strip(), traceback


_TAG = re.compile(r"^(\[[\w ]+\]:\s?)+")  # [rank1]: prefixes (ours, torch's excepthook's)
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning)\w*)(?:: (.*))?$")


def exception_from_log(path: str | Path, tail_bytes: int = 65536) -> tuple[str, str, str] | None:
    """(type, message, traceback) of the last Python traceback in a rank's stderr log, if any.

    For scripts that do not write torch elastic's error file (no ``@record``).
    """
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - tail_bytes))
            lines = [_TAG.sub("", line) for line in log.read().decode(errors="replace").splitlines()]
    except OSError:
        return None
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    block = lines[starts[-1]:]
    for line in block[1:]:
        match = _EXCEPTION_LINE.match(line)
        if match and not line.startswith(" "):
            exc_type = match.group(1).rsplit(".", 1)[-1]
            end = block.index(line)
            return exc_type, (match.group(2) or "").strip(), "\n".join(block[: end + 1])
    return None


def last_frames(traceback: str, count: int = 3) -> list[str]:
    """The last ``count`` ``File "…", line N, in f`` lines of a formatted traceback."""
    frames = [line.strip() for line in traceback.splitlines() if line.strip().startswith("File ")]
    return frames[-count:]


def oom_kill_count() -> int | None:
    """The memory cgroup's OOM-kill counter, when readable (cgroup v2 or v1)."""
    for name in _OOM_CGROUP_FILES:
        try:
            for line in Path(name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def oom_killed(pid: int, kills_before: int | None) -> bool:
    """True when the cgroup counted a new OOM kill, or the kernel log names ``pid``."""
    now = oom_kill_count()
    if kills_before is not None and now is not None and now > kills_before:
        return True
    try:
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=3).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(re.search(rf"(Out of memory|oom-kill).*\b{pid}\b|Killed process {pid}\b", log))
