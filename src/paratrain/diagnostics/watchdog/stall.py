"""Who stalled? Pure functions over the ranks' progress records (no processes, no store).

Every rank publishes a :class:`Beat`: the steps it completed, the phase it is in, for
how long it has not moved, and whether its main thread *waits* inside a collective
(DDP's gradient all-reduce in backward, an all-reduce, a barrier: seen in its innermost
Python frame, or a published "collective" phase). When one rank stops (a hang, a sleep,
a deadlock), the others soon wait for it inside a collective, so *every* rank eventually
stops moving. The evidence decides first: the ranks that are *not* inside a collective
while others wait are the stalled ones, wherever they stopped (before forward, in it,
between backward and step, in evaluation, in a checkpoint write, in a rank-0-only
branch). Only when the evidence does not separate the ranks (all wait, or none does)
the one *behind* is named: fewest steps completed, then earliest phase of its step.
A rank whose watchdog stopped publishing (frozen process, the GIL held by C code) is
stalled too. Ranks that all wait, in different places of the same step, point at a
collective that only some ranks reached (``if rank == 0: ckpt.save(...)``). A rank
inside a declared long phase (``rt.busy("evaluation")``) is not stalled until that
phase passes its own limit; then it is named with the phase.
"""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, dataclass

# The order of the phases within one step; after the optimizer step the counter grows and
# the rank is in "logging" (logs, evaluation, checkpoints, callbacks) of the new count.
PHASES = ("setup", "logging", "checkpoint", "evaluation", "data", "forward", "backward", "optimizer", "collective")
COLLECTIVE_PHASES = ("checkpoint", "evaluation", "backward", "optimizer", "collective")


@dataclass(frozen=True)
class Beat:
    """One rank's progress, as published: ``idle_s`` is measured on that rank's own clock."""

    rank: int
    host: str
    pid: int
    step: int
    phase: str
    idle_s: float
    tick: int  # grows at every publication: a rank whose tick stops has a dead watchdog
    waits: bool = False  # its main thread is inside a collective (evidence, not the phase order)
    wait_s: float = 0.0  # for how long the same collective call has been seen waiting
    busy: str = ""  # a declared long phase (rt.busy), with how long it has run and may run
    busy_s: float = 0.0
    busy_limit_s: float = 0.0
    # False from a Runtime's own watchdog, which judges only collectives: the idle time it publishes may span
    # a setup nobody judged, and must not count as a stall for an explicit watchdog that reads it before this
    # rank's own explicit one (``pt.fit``'s, started a poll later here) has published.
    idle_judged: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: bytes | str) -> Beat:
        return cls(**json.loads(text))

    @property
    def position(self) -> tuple[int, int]:
        order = PHASES.index(self.phase) if self.phase in PHASES else len(PHASES)
        return (self.step, order)

    @property
    def busy_too_long(self) -> bool:
        return bool(self.busy) and self.busy_s >= self.busy_limit_s

    def where(self) -> str:
        return f"rank {self.rank} (host {self.host}, pid {self.pid}) at step {self.step}, phase {self.phase}"


def stalled_ranks(
    beats: list[Beat], stall_timeout_s: float, silent: set[int] = frozenset(), in_collective_only: bool = False
) -> list[int]:
    """The ranks to blame, or ``[]`` while no rank has been idle for ``stall_timeout_s``
    (``in_collective_only``: while no rank has waited in one collective call that long).

    ``silent`` are ranks whose watchdog stopped publishing for that long (seen by the reader).
    """
    if not beats:
        return []
    if silent:
        return sorted(silent)
    over = [beat.rank for beat in beats if beat.busy_too_long]
    if over:
        return sorted(over)
    if any(beat.busy for beat in beats):
        return []  # a declared long phase: the others wait for it, within its limit
    if in_collective_only:
        if not any(beat.waits and beat.wait_s >= stall_timeout_s for beat in beats):
            return []
    elif max((beat.idle_s for beat in beats if beat.idle_judged), default=0.0) < stall_timeout_s:
        return []
    outside = [beat.rank for beat in beats if not beat.waits]
    if 0 < len(outside) < len(beats):
        return sorted(outside)  # the others wait in a collective for these
    if in_collective_only and not outside and min(beat.wait_s for beat in beats) < stall_timeout_s:
        return []  # every rank is in a collective, some only just: it is completing
    behind = min(beat.position for beat in beats)
    return sorted(beat.rank for beat in beats if beat.position == behind)


def subset_collective(beats: list[Beat], stalled: list[int]) -> bool:
    """True when the ranks stopped at different places of one step with a collective among them.

    That is what a collective inside a rank-dependent branch looks like: some ranks wait
    in it, the others never arrive (they wait in another collective, or ended).
    """
    places = {(beat.step, beat.phase) for beat in beats}
    if len(places) < 2 or len(stalled) == len(beats):
        return False
    steps = {beat.step for beat in beats}
    # The rank behind is itself waiting in a collective (not sleeping in its own code).
    behind_waits = all(beat.waits or beat.phase in COLLECTIVE_PHASES for beat in beats if beat.rank in stalled)
    if any(not beat.waits for beat in beats) and any(beat.waits for beat in beats):
        return False  # the evidence says who is outside the collectives: no guess needed
    return max(steps) - min(steps) <= 1 and behind_waits


def _why_silent(beat: Beat | None) -> str:
    """Why a rank's progress reports stopped: on this host its process can be looked at (stopped by
    a signal, alive but not reporting, gone); on another, only the host can say."""
    state = process_state(beat.pid) if beat is not None and beat.host == socket.gethostname() else None
    if state == "stopped":
        return (f"its process (pid {beat.pid}) is stopped, not progressing (SIGSTOP, Ctrl-Z, a debugger); "
                "the job ends it with the others")
    if state == "gone":
        return "its process died (its launcher's output says why)"
    if state == "running":
        return "its process is alive but neither progresses nor reports (frozen, or C code holds the GIL); see its log"
    return "its process died or its host is unreachable (look at that host; its launcher's output says why if it still runs)"


def process_state(pid: int) -> str | None:
    """``"stopped"`` (state T/t), ``"gone"`` (no such process, or a zombie), ``"running"``, or None
    when this system cannot say (no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"
    except (OSError, IndexError):
        return None
    return "stopped" if state in ("T", "t") else "gone" if state in ("Z", "X") else "running"


SUBSET_HINT = (
    "a collective reached by only some ranks looks like this: a rank-dependent branch "
    "(`if rank == 0:` / `if rt.is_main:`) around ckpt.save, barrier, all_reduce or evaluation "
    "must run on every rank"
)


def stall_message(
    beats: list[Beat], stalled: list[int], stall_timeout_s: float, frames: dict[int, str], gone: set[int] = frozenset()
) -> str:
    """One line: who stalled, where, the top frames of its stack, what the others do, a hint.

    ``gone`` are ranks whose progress records stopped coming: dead processes or lost hosts.
    """
    by_rank = {beat.rank: beat for beat in beats}
    parts = []
    for rank in stalled:
        beat = by_rank.get(rank)
        where = beat.where() if beat else f"rank {rank}"
        if rank in gone and rank not in frames:
            last = f"{where} was its last report" if beat else f"rank {rank} sent no progress report"
            parts.append(f"{last}: {_why_silent(beat)}")
            continue
        stack = frames.get(rank) or "no stack received (frozen, or C code holds the GIL); see its log"
        if beat is not None and beat.busy_too_long:
            where += (f", busy with {beat.busy!r} for {beat.busy_s:.0f}s, past its limit of {beat.busy_limit_s:g}s "
                      "(rt.busy(..., limit=) if it may take longer)")
        outside = beat is not None and not beat.waits and any(b.waits for b in beats)
        parts.append(f"{where}, in {stack}" + (" (not in a collective: the others wait for it)" if outside else ""))
    others = [by_rank[r] for r in sorted(by_rank) if r not in stalled]
    waiting = "; ".join(f"rank {b.rank} waits at step {b.step}, phase {b.phase}"
                        + (" (inside a collective)" if b.waits else "") for b in others)
    head = f"stall: no progress for {stall_timeout_s:g}s: " + "; ".join(parts)
    text = head + (f"; {waiting}" if waiting else "")
    if subset_collective(beats, stalled):
        text += f"; {SUBSET_HINT}"
    elif len(stalled) == len(beats) and len(beats) > 1:
        text += "; every rank stopped at the same place: a deadlock in the code or a network problem (paratrain doctor)"
    return text + "; every rank's Python stack is in its log"
