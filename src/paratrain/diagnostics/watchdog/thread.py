"""The watchdog every rank runs: a thread that publishes this rank's progress, reads everyone's,
and ends the job naming the stalled rank (the package's docstring tells the whole story).

:class:`Watchdog` is the thread; :class:`NoWatchdog` its calls with nothing behind them;
:func:`mark` and :func:`busy` are what the loop, the loaders and the Runtime call on it.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import math
import os
import socket
import threading
import time
from typing import Any

from paratrain.diagnostics import stacks, step_phases
from paratrain.diagnostics.watchdog.board import ProgressBoard, job_store
from paratrain.diagnostics.watchdog.timeouts import DEFAULT_STALL_TIMEOUT_S, STACK_WAIT_S, poll_interval
from paratrain.diagnostics.watchdog.stall import Beat, stall_message, stalled_ranks
from paratrain.diagnostics.watchdog.verdict import continue_stopped, end_process
from paratrain.errors import ConfigError

FINISHED = "finished"  # the phase a rank publishes when its watchdog stops normally
_HARD_EXIT_GRACE_S = 30.0  # faulthandler's last resort fires this long after the stall timeout
_SILENT_POLLS = 4  # a rank whose publications stopped this many polls ago is gone, once we wait too
LINK_PROBE_S = 1.0  # seconds between the link's round trips to the store (one small store call each)

_active: Watchdog | None = None


def mark(phase: str, step: int | None = None) -> None:
    """Record this rank's progress on the running watchdog, if any, and time the phase on a running
    :class:`~paratrain.diagnostics.step_phases.PhaseClock` (cheap; main thread)."""
    step_phases.enter(phase)
    if _active is not None:
        _active.progress(step, phase)


class Watchdog:
    """Stall detection for this rank. Start it on every rank (it is not a collective, but a
    rank without one is seen only as idle by the others).

    Args:
        stall_timeout: seconds without progress on some rank before the job is ended.
        rank, world_size: this process's place (default: torch.distributed's, else 0 of 1).
        poll: seconds between publications (default: stall_timeout / 10, within 0.5–10).
        store: a ``torch.distributed.Store`` shared by all ranks (default: a new client of
            the job's store at MASTER_ADDR:MASTER_PORT; none with one process).
        on_stall: called with the message instead of ending the process (tests, notebooks).
        in_collective_only: end the job only when some rank has waited inside a collective
            for ``stall_timeout`` (the default watchdog of a Runtime: it never ends a job that
            a collective timeout would not have ended); otherwise any rank idle that long.

    An explicit watchdog started while another runs (``pt.fit``'s inside a Runtime's own)
    takes over until it stops; the outer one then goes on.

    Raises:
        ConfigError: a stall timeout that is not a positive number.
    """

    def __init__(
        self,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT_S,
        rank: int | None = None,
        world_size: int | None = None,
        poll: float | None = None,
        store: Any = None,
        on_stall: Any = None,
        in_collective_only: bool = False,
    ):
        if isinstance(stall_timeout, bool) or not isinstance(stall_timeout, (int, float)) or not stall_timeout > 0:
            raise ConfigError(f"stall_timeout must be a positive number of seconds, got {stall_timeout!r}")
        from paratrain import comm

        self.stall_timeout = float(stall_timeout)
        self.rank = comm.rank() if rank is None else rank
        self.world_size = comm.world_size() if world_size is None else world_size
        self.poll = poll if poll is not None else poll_interval(self.stall_timeout)
        self._store = store
        self._board: ProgressBoard | None = None  # the store's records, once started
        self._on_stall = on_stall
        self._host = socket.gethostname()
        self._step = 0
        self._phase = "setup"
        self._moved_at = time.monotonic()
        self._moves = 0
        self._counted_steps = True  # until progress() is given an explicit step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.report: str | None = None
        self._finished: set[int] = set()
        self._silent: set[int] = set()
        self._store_ok_at = time.monotonic()
        self._asking_since: float | None = None
        self._in_collective_only = in_collective_only
        self._outer: Watchdog | None = None  # the watchdog this one took over from
        self._suspended = False
        self._busy, self._busy_since, self._busy_limit = "", 0.0, 0.0
        self._busy_ended: tuple[str, float, float, float] | None = None  # (phase, seconds, limit, ended at)
        self._waiting_at: Any = None  # (the main thread's place, since when) while it waits in a collective

    # ---- main thread ------------------------------------------------------------------------
    def progress(self, step: int | None = None, phase: str | None = None) -> None:
        """This rank moved: optionally at ``step`` (steps completed) and in ``phase``."""
        if step is not None:
            self._step, self._counted_steps = int(step), False
        elif phase == "optimizer" and self._counted_steps and self._phase != "optimizer":
            self._step += 1  # an own loop that never names its steps: count rt.step calls
        if phase is not None:
            self._phase = phase
        self._moves += 1
        self._moved_at = time.monotonic()

    def start(self) -> Watchdog:
        global _active
        if self._thread is not None:
            return self
        self._outer = _active
        if self._outer is not None:
            self._outer._suspended = True
        if self._store is None and self.world_size > 1:
            self._store = job_store(self.stall_timeout)
        if self._store is not None:
            self._board = ProgressBoard(self._store, self.rank, self.world_size)
        self._thread = threading.Thread(target=self._run, name="paratrain-watchdog", daemon=True)
        self._thread.start()
        # Stopped before the interpreter finalizes, whoever forgot to stop it (a Runtime inside a group it
        # did not make, never closed): a daemon thread still inside a store call then (the GIL released
        # in C++) is ended by CPython as it takes the GIL back, through C++ frames that cannot be
        # unwound, and the whole process aborts (SIGABRT) after its work is done.
        atexit.register(self.stop)
        if self._store is not None:
            threading.Thread(target=self._watch_store, name="paratrain-watchdog-store", daemon=True).start()
        _active = self
        return self

    def stop(self) -> None:
        global _active
        outer, self._outer = self._outer, None
        if _active is self:
            _active = outer
        self._stop.set()
        atexit.unregister(self.stop)
        if self._thread is not None and self._thread is not threading.current_thread() and self.report is None:
            self._thread.join(timeout=self.poll + 5)
        faulthandler.cancel_dump_traceback_later()
        self._waiting_at = None  # let go of the main thread's frame
        if outer is not None:  # it goes on from here, with this one's count of steps
            outer._step, outer._phase = max(outer._step, self._step), self._phase
            outer._moved_at, outer._suspended = time.monotonic(), False
            return  # its next publication replaces this one's
        if self._board is not None and self._thread is not None and self.report is None:
            try:  # the others must not take a rank that finished for a silent one
                self._board.publish(Beat(self.rank, self._host, os.getpid(), self._step, FINISHED, 0.0, -1))
            except Exception:
                pass

    @contextlib.contextmanager
    def busy(self, name: str, limit_s: float):
        """This rank is in a long phase that others wait for (see :func:`busy`)."""
        self._busy, self._busy_since, self._busy_limit = name, time.monotonic(), limit_s
        try:
            yield
        finally:
            now = time.monotonic()
            self._busy_ended = (name, now - self._busy_since, limit_s, now)
            self._busy = ""
            self.progress()

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- the watchdog thread ------------------------------------------------------------
    def _run(self) -> None:
        tick = 0
        seen: dict[int, tuple[int, float]] = {}  # rank -> (its last tick, when it changed, our clock)
        exchange_at = time.monotonic() + self.poll
        # Woken at least once a second to time one store round trip (the straggler detector's link),
        # whatever the poll: with the default stall timeout the poll is 10 s, too rare for a link verdict.
        while not self._stop.wait(min(self.poll, LINK_PROBE_S)):
            if self._suspended:
                continue  # an explicit watchdog runs in its place
            if not self._probe_link() or time.monotonic() < exchange_at:
                continue
            if self._stop.is_set():
                break  # stopped while this thread waited in a store call: arm nothing after stop()
            exchange_at = time.monotonic() + self.poll
            tick += 1
            # The last resort, if this thread ever stops running (C code holding the GIL): re-armed
            # at every publication, it fires only when this thread could not publish for that long.
            faulthandler.dump_traceback_later(self._hard_exit_after(), exit=True)
            beat = self._beat(tick)
            try:
                self._asking_since = time.monotonic()
                beats = self._exchange(beat)
            except Exception as exc:
                if self._store_lost(str(exc) or type(exc).__name__):
                    return
                continue
            finally:
                self._asking_since = None
            self._store_ok_at = time.monotonic()
            now = time.monotonic()
            beats = [b for b in beats if b.phase != FINISHED]
            for other in beats:
                if seen.get(other.rank, (None,))[0] != other.tick:
                    seen[other.rank] = (other.tick, now)
            # We wait (the Runtime's own watchdog: inside a collective) for the stall timeout.
            we_wait = (beat.waits and beat.wait_s >= self.stall_timeout) if self._in_collective_only \
                else beat.idle_s >= self.stall_timeout
            silent = set()
            if we_wait or not self._in_collective_only:
                # A rank that is not waiting itself has no business declaring others gone: their
                # watchdog may only be held up (a collective that keeps the GIL while it waits
                # for this very rank, torch's monitored_barrier on rank 0).
                silent = {r for r, (_, changed) in seen.items() if now - changed > self.stall_timeout + self.poll}
            if not silent and we_wait:
                # We wait, and some rank's watchdog stopped publishing a while ago: that rank's
                # process died or its host is unreachable (a live watchdog publishes every poll).
                silent = {r for r, (_, changed) in seen.items() if now - changed > _SILENT_POLLS * self.poll}
            missing = set(range(self.world_size)) - {b.rank for b in beats} - self._finished
            if missing and not silent and we_wait:
                silent = missing  # never started a watchdog, or died before its first report
            stalled = stalled_ranks(beats, self.stall_timeout, silent, in_collective_only=self._in_collective_only)
            self._silent = silent
            if stalled:
                self._report(beats, stalled)
                return
        if self._stop.is_set():  # stopped: no last resort may outlive this watchdog (stop() may have timed out)
            faulthandler.cancel_dump_traceback_later()

    def _beat(self, tick: int) -> Beat:
        """This rank's record now: progress, and whether (and how long) it waits in a collective."""
        now = time.monotonic()
        place = None
        # Only a rank that has not moved for a poll can be waiting long enough to matter: a rank
        # that makes progress is not sampled (no cost, and no frame reads beside its forks).
        if now - self._moved_at >= self.poll or self._waiting_at is not None:
            try:
                place = stacks.main_thread_collective()  # the same frame object seen again: the same wait
            except Exception:  # no evidence this time is better than a dead watchdog thread
                place = None
        if place is None:
            self._waiting_at = None
        elif self._waiting_at is None or self._waiting_at[0] is not place:
            self._waiting_at = (place, now)
        waits = self._waiting_at is not None
        busy, busy_s, busy_limit = self._busy, now - self._busy_since, self._busy_limit
        ended = self._busy_ended
        if not busy and ended is not None and now - ended[3] < self.stall_timeout and ended[1] < ended[2]:
            # A declared phase still covers the stall timeout after it ends: the others' records that
            # waited through it may be a poll old (more on a loaded host), and must not make this rank,
            # just released, look like the one they wait for.
            busy, busy_s, busy_limit, _ = ended
        return Beat(self.rank, self._host, os.getpid(), self._step, self._phase, round(now - self._moved_at, 3), tick,
                    waits=waits, wait_s=round(now - self._waiting_at[1], 3) if waits else 0.0, busy=busy,
                    busy_s=round(busy_s, 3) if busy else 0.0, busy_limit_s=busy_limit if busy else 0.0,
                    idle_judged=not self._in_collective_only)

    def _hard_exit_after(self) -> float:
        busy_left = self._busy_limit - (time.monotonic() - self._busy_since) if self._busy else 0.0
        return max(self.stall_timeout, busy_left) + _HARD_EXIT_GRACE_S

    def _watch_store(self) -> None:
        """Second thread: a store call that never returns (node 0's host unreachable: no
        reset, no timeout on every call) must not silence the watchdog."""
        while not self._stop.wait(self.poll) and self.report is None:
            since = self._asking_since
            if since is not None and time.monotonic() - since >= self.stall_timeout:
                if self._store_lost(f"a call has been waiting for {time.monotonic() - since:.0f}s"):
                    return

    def _store_lost(self, cause: str) -> bool:
        """The store did not answer. True when the job is ended for it (this rank waits too).

        The store lives in node 0's launcher (torchrun's rendezvous): when that node dies,
        every rank elsewhere waits in a collective with nobody to report to.
        """
        now = time.monotonic()
        idle = now - self._moved_at
        if self.report is not None or idle < self.stall_timeout or now - self._store_ok_at < self.stall_timeout:
            return False
        beat = Beat(self.rank, self._host, os.getpid(), self._step, self._phase, round(idle, 3), -1)
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        cause = (cause.strip().splitlines() or ["no answer"])[0]
        self.report = (
            f"stall: no progress for {self.stall_timeout:g}s: {beat.where()}, and the job's store at {where} "
            f"(node 0's launcher) has not answered for {self.stall_timeout:g}s ({cause}): node 0 died or is "
            "unreachable; check that host, then start every node again"
        )
        stacks.dump_all_threads(f"paratrain watchdog: rank {self.rank}: the job's store is lost; this rank's threads:")
        if self._on_stall is not None:
            faulthandler.cancel_dump_traceback_later()
            self._on_stall(self.report)
            return True
        end_process(self.report)
        return True

    def _probe_link(self) -> bool:
        """Time one round trip to the job's store (node 0's launcher): this rank's link sample. False
        when the store is lost and the watchdog thread must end (a call that hangs is named by
        :meth:`_watch_store`)."""
        if self._board is None:
            return True
        try:
            self._asking_since = time.monotonic()
            asked = time.perf_counter()
            self._board.round_trip()
            step_phases.link_sample(time.perf_counter() - asked)
        except Exception as exc:
            return not self._store_lost(str(exc) or type(exc).__name__)
        finally:
            self._asking_since = None
        return True

    def _exchange(self, beat: Beat) -> list[Beat]:
        if self._board is None:
            return [beat]
        beats = self._board.exchange(beat)
        self._finished = {b.rank for b in beats if b.phase == FINISHED}
        return beats

    def _report(self, beats: list[Beat], stalled: list[int]) -> None:
        stacks.dump_all_threads(f"paratrain watchdog: rank {self.rank}: a stall was detected; this rank's threads:")
        frames = {self.rank: stacks.main_thread_frames()}
        if self._board is not None:
            self._board.share_frames(frames[self.rank])
            others = [r for r in stalled if r not in self._silent and r != self.rank]  # a gone rank sends no frames
            frames.update(self._board.collect_frames(others, STACK_WAIT_S))
        self.report = stall_message(beats, stalled, self.stall_timeout, frames, gone=self._silent)
        continue_stopped(beats, stalled, self._host)
        if self._on_stall is not None:
            faulthandler.cancel_dump_traceback_later()
            self._on_stall(self.report)
            return
        end_process(self.report)


class NoWatchdog:
    """What ``rt.watchdog()`` gives when the job's stall timeout is 0 (``paratrain run
    --stall-timeout 0``): the calls of :class:`Watchdog`, and no thread, store or timer."""

    report: str | None = None

    def progress(self, step: int | None = None, phase: str | None = None) -> None:
        pass

    def start(self) -> NoWatchdog:
        return self

    def stop(self) -> None:
        pass

    def __enter__(self) -> NoWatchdog:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


class LoaderProgress:
    """A loader's position listener that marks progress at every batch handed out
    (``rt.loader`` adds one: a rank that gets batches is moving)."""

    def __init__(self, phase: str):
        self.phase = phase

    def loader_batch(self, index: int, total: int) -> None:
        mark(self.phase)

    def loader_done(self) -> None:
        pass


def busy(name: str, limit_s: float, longest_s: float = math.inf):
    """Context: this rank is in a long phase that the other ranks wait for (``rt.busy``).

    While it lasts, and for one stall timeout after it ends (the others' last records, which
    waited through it, may be that old), the others waiting inside a collective are not a
    stall; when it passes ``limit_s`` the running watchdog ends the job naming this rank and ``name``. Without a
    running watchdog it does nothing.

    Raises:
        ConfigError: an empty name, a limit that is not a positive number of seconds, or one
            past ``longest_s`` (the process group's timeout: the waiting ranks would fail first).
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"rt.busy() needs the phase's name (rt.busy('evaluation')), got {name!r}")
    if isinstance(limit_s, bool) or not isinstance(limit_s, (int, float)) or not 0 < limit_s < math.inf:
        raise ConfigError(f"rt.busy({name!r}, limit=...) must be a positive number of seconds, got {limit_s!r}")
    if limit_s > longest_s:
        raise ConfigError(f"rt.busy({name!r}, limit={limit_s:g}) is longer than the process group's timeout "
                          f"({longest_s:g}s): the ranks waiting for this one would time out first; "
                          "raise pt.Runtime(timeout=...)")
    if _active is None:
        return contextlib.nullcontext()
    return _active.busy(name, float(limit_s))
