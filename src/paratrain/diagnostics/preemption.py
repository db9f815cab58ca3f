"""Preemption: SIGTERM means "finish the step, save, exit with PREEMPTED_EXIT_CODE".

SLURM (``scancel``, time limit, preemption) and Kubernetes (pod eviction) send SIGTERM,
then SIGKILL after a grace period (SLURM's KillWait, Kubernetes'
terminationGracePeriodSeconds, torch elastic's agent: 30 s). The signal reaches the
launcher, the workers, or both, and each rank at a different moment of its step; a
checkpoint is a collective, so the ranks must *agree* on the step after which they save.
:meth:`PreemptionGuard.agree` is that agreement: one all-reduce of two flags on the CPU
control group per step (no GPU synchronisation), which also carries "a timed save is
due" for ``--save-every-minutes`` (ranks' clocks differ; the decision must not).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import torch

from paratrain.errors import PreemptedError

#: Exit status of a preempted run: sysexits.h's EX_TEMPFAIL, "temporary failure; try again".
#: The launcher (``paratrain run``/``train``) exits with it too; rerunning resumes.
PREEMPTED_EXIT_CODE = PreemptedError.exit_code


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

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
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
        flags = torch.tensor([float(self.requested_by is not None), float(due)])
        flags = comm.any_rank(flags)
        return bool(flags[0]), bool(flags[1])
