"""The fit loop's answer to SIGTERM and Ctrl-C: save the step every rank agreed on, then stop as preempted.

:class:`~paratrain.diagnostics.preemption.PreemptionGuard` catches the signal and agrees
across ranks when to act on it; :class:`FitPreemption` is how the fit loop acts: after
every step it saves when asked (a signal on any rank, or a timed ``--save-every-minutes``
save), and a preempted run ends with :class:`~paratrain.errors.PreemptedError` (exit 75)
on every rank, saying where its checkpoint is and what to run next.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from paratrain.diagnostics import watchdog
from paratrain.diagnostics.preemption import PreemptionGuard
from paratrain.errors import PreemptedError


class FitPreemption(PreemptionGuard):
    """The fit loop's preemption guard; a context like :class:`PreemptionGuard`.

    Args:
        save_every_minutes: also ask for a save this often (None: only on a signal).
    """

    def save_if_asked(self, step: int, unsaved: bool, save: Callable[[], None], checkpoints: Path | None,
                      finish: Callable[[], None] = lambda: None) -> None:
        """After step ``step``: call ``save`` (when ``unsaved``) if any rank got SIGTERM/SIGINT or a
        timed save is due; then stop if it was a signal. Collective: every rank, after every step.

        Raises:
            PreemptedError: after the checkpoint, on every rank (exit code 75).
        """
        watchdog.mark("collective")
        preempt, due = self.poll()
        if (preempt or due) and unsaved:
            save()
        if preempt:
            finish()  # a checkpoint written in the background is complete before the run says it stopped
            raise self.preempted(step, checkpoints, f"after step {step}", "run the same command again to resume")

    def stop_if_asked_at_the_end(self, step: int, checkpoints: Path | None) -> None:
        """A stop signal that came after the last step: the run finished and saved; say so the way a
        preempted run does (exit 75), so the launcher reports what happened instead of "stopped".
        Collective (the signal may have reached one node only).

        Raises:
            PreemptedError: on every rank, when any rank got SIGTERM or SIGINT since the last agreement.
        """
        preempt, _ = self.agree()
        if preempt:
            raise self.preempted(step, checkpoints, f"after the last step ({step})", "the run is complete")

    def preempted(self, step: int, checkpoints: Path | None, when: str, advice: str) -> PreemptedError:
        """The error a preempted run stops with: which signal, when, where its checkpoint is, what next."""
        cause = self.requested_by or "a signal on another rank"
        verb = "interrupted by SIGINT (Ctrl-C)" if cause == "SIGINT" else f"preempted by {cause}"
        where = f"checkpoint at step {step} in {checkpoints}" if checkpoints is not None \
            else "nothing saved (no output directory)"
        return PreemptedError(f"{verb} {when}: {where}; {advice}")
