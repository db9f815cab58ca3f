"""Preemption: SIGTERM (and Ctrl-C's SIGINT) means "finish the step, save, exit with PREEMPTED_EXIT_CODE".

SLURM (``scancel``, time limit, preemption) and Kubernetes (pod eviction) send SIGTERM,
then SIGKILL after a grace period (SLURM's KillWait, Kubernetes'
terminationGracePeriodSeconds, torch elastic's agent: 30 s). The signal reaches the
launcher, the workers, or both, and each rank at a different moment of its step; a
checkpoint is a collective, so the ranks must *agree* on the step after which they save.
:meth:`PreemptionGuard.agree` is that agreement: one all-reduce of two flags on the CPU
control group per step (no GPU synchronisation), which also carries "a timed save is
due" for ``--save-every-minutes`` (ranks' clocks differ; the decision must not).
A loop calls :meth:`PreemptionGuard.poll` every step instead: it agrees only about every
:data:`POLL_SECONDS`, so fast steps pay for one small all-reduce per second, not per step.
``pt.fit`` uses the guard itself; own loops get :class:`Preemption` (``rt.preemption()``).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

import torch

from paratrain.errors import PreemptedError

#: Exit status of a preempted run: sysexits.h's EX_TEMPFAIL, "temporary failure; try again".
#: The launcher (``paratrain run``/``train``) exits with it too; rerunning resumes.
PREEMPTED_EXIT_CODE = PreemptedError.exit_code
#: The signals that mean "finish the step, save, stop": SIGTERM (batch systems, Kubernetes, kill)
#: and SIGINT (Ctrl-C, which the terminal sends to the launcher and every worker at once, and
#: torch's agent passes on again): both end as tidily, with a checkpoint to resume from.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: How often :meth:`PreemptionGuard.poll` agrees: far inside every grace period (≥ 30 s),
#: rare enough that a 10 ms step pays about 0.05 % for it instead of a few percent.
POLL_SECONDS = 1.0
MAX_POLL_STEPS = 1000


def poll_interval(seconds_per_step: float) -> int:
    """Steps between agreements for steps of ``seconds_per_step`` (the slowest rank's)."""
    if not seconds_per_step > 0:
        return 1
    return max(1, min(MAX_POLL_STEPS, int(POLL_SECONDS / seconds_per_step)))


class PreemptionGuard:
    """Catches SIGTERM in the main thread and agrees across ranks when to act on it.

    Use as a context (the previous handler is restored on exit). Not a collective itself;
    :meth:`agree` is.

    Args:
        save_every_minutes: also report a timed save as due this often (None: never).
    """

    def __init__(self, save_every_minutes: float | None = None):
        self.save_every_s = save_every_minutes * 60 if save_every_minutes else None
        self.requested_by: str | None = None
        self._previous: Any = None
        self._installed = False
        self._last_save = time.monotonic()
        self._interval = 1  # steps between agreements (poll); the same on every rank
        self._since = 0
        self._polled_at = time.monotonic()

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            self._previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._installed = False

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only a flag: the step in progress finishes, the loop saves at its end.
        self.requested_by = signal.Signals(signum).name

    def saved(self) -> None:
        """A checkpoint was written: the timed-save clock starts again."""
        self._last_save = time.monotonic()

    def agree(self) -> tuple[bool, bool]:
        """``(preempt, save_due)`` as every rank sees it: true when true on any rank. Collective."""
        from paratrain import comm

        due = self.save_every_s is not None and time.monotonic() - self._last_save >= self.save_every_s
        flags = comm.any_rank(self._flags(due))
        return bool(flags[0]), bool(flags[1])

    def _flags(self, due: bool, seconds_per_step: float = 0.0) -> torch.Tensor:
        return torch.tensor([float(self.requested_by is not None), float(due), seconds_per_step], dtype=torch.float64)

    def poll(self) -> tuple[bool, bool]:
        """:meth:`agree`, every :func:`poll_interval` calls; ``(False, False)`` between. Collective:
        every rank calls it once per step (the interval comes from the agreed slowest step
        time, so all ranks communicate on the same steps)."""
        from paratrain import comm

        self._since += 1
        if self._since < self._interval:
            return False, False
        now = time.monotonic()
        due = self.save_every_s is not None and now - self._last_save >= self.save_every_s
        flags = comm.any_rank(self._flags(due, (now - self._polled_at) / self._since))
        self._interval = poll_interval(float(flags[2]))
        self._since, self._polled_at = 0, time.monotonic()
        return bool(flags[0]), bool(flags[1])


class Preemption(PreemptionGuard):
    """SIGTERM-safe own loops: save when asked, then exit "preempted" (75); ``rt.preemption()``.

    The same agreement ``pt.fit`` uses::

        with rt.preemption(save_every_minutes=30) as preemption:
            for step, (x, y) in enumerate(loader, start=1):
                ...                                   # forward, rt.backward, rt.step
                if preemption.should_save():          # collective: every rank, every step
                    ckpt.save(step=step)
                preemption.stop_if_preempted()        # after the save: exit 75 on every rank

    Rerunning the same command resumes (``ckpt.resume()``). The handler is installed on
    entering the context and the previous one restored on leaving it.

    Args:
        save_every_minutes: also ask for a save this often (None: only on SIGTERM).
    """

    def __init__(self, save_every_minutes: float | None = None):
        super().__init__(save_every_minutes)
        self.preempted = False

    def should_save(self) -> bool:
        """True on every rank when a checkpoint is due now: some rank got SIGTERM, or
        ``save_every_minutes`` passed (the save clock restarts then).

        Collective: call it on every rank at the same point of every step — SIGTERM reaches
        the ranks at different moments, and a checkpoint needs all of them. Costs one small
        all-reduce on the CPU (no GPU synchronisation) about once a second (:meth:`poll`).
        """
        preempt, due = self.poll()
        self.preempted = self.preempted or preempt
        if preempt or due:
            self.saved()
        return preempt or due

    def stop_if_preempted(self) -> None:
        """When :meth:`should_save` agreed on a preemption: end this process with exit code
        75 (EX_TEMPFAIL; ``paratrain run`` exits with it too). Call it after the save.

        Not a collective: every rank got the same answer from :meth:`should_save`.

        Raises:
            SystemExit: with code 75, after rank 0 printed one line saying so.
        """
        if not self.preempted:
            return
        from paratrain import comm
        from paratrain.env.torchelastic import record_for_launcher

        if comm.is_main():
            cause = self.requested_by or "SIGTERM on another rank"
            print(f"paratrain: preempted by {cause}; the loop saved and stops: run the same command again to resume",
                  file=sys.stderr, flush=True)
        # In torch elastic's error file: paratrain run says "preempted" and exits 75 only for workers
        # that recorded it, never for a script's own exit code 75.
        record_for_launcher(PreemptedError(f"preempted by {self.requested_by or 'SIGTERM on another rank'}; "
                                           "the loop saved and stops"))
        raise SystemExit(PREEMPTED_EXIT_CODE)

