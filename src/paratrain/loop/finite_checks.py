"""The fit loop's two questions about non-finite training, and what it says when the answer is bad.

:class:`~paratrain.loop.nonfinite.NonFiniteGuard` knows *whether* a loss, a gradient or a
weight went NaN or inf; :class:`FiniteChecks` asks it at the loop's points — before every
optimizer step under ``--on-nonfinite skip``, before every log line with a loss, every
evaluation and every save — and turns a bad answer into a console line, a run-log record
and, when the run must stop, a :class:`~paratrain.errors.NonFiniteError` that names the
last good checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from paratrain.diagnostics import watchdog
from paratrain.errors import NonFiniteError
from paratrain.loop.nonfinite import NonFiniteGuard, stop_message
from paratrain.loop.run_log import RunLog
from paratrain.loop.state import FitState


class FiniteChecks:
    """Where the fit loop asks ``guard`` whether training is still finite.

    Args:
        guard: the run's guard (its policy, its count of skipped steps).
        last_good: the newest checkpoint's path, or None; asked only when the run stops.
    """

    def __init__(self, guard: NonFiniteGuard, last_good: Callable[[], str | None]):
        self.guard = guard
        self._last_good = last_good
        self._finite_at = -1  # the last step the ranks agreed that training is finite

    def skip_step(self, state: FitState, losses: list[torch.Tensor], optimizer: Any, log: RunLog) -> bool:
        """``--on-nonfinite skip``: drop this step's gradients when any rank's loss or gradients are
        not finite (the step still counts). Collective when skipping is on.

        Raises:
            NonFiniteError: more skipped steps than ``max_nonfinite_skips``.
        """
        guard = self.guard
        if not guard.skips_batches or not guard.should_skip(losses, optimizer):
            return False
        optimizer.zero_grad(set_to_none=True)
        state.nonfinite_skips = guard.skipped
        step = state.step + 1
        log.console(f"step {step}: skipped (non-finite loss or gradients; {guard.skipped} of at most "
                    f"{guard.max_skips} skips)")
        log.record("nonfinite_skip", step, skipped=guard.skipped)
        if guard.out_of_skips:
            last_good = self._last_good()
            saved = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint was saved"
            raise NonFiniteError(
                f"stopped: more than {guard.max_skips} steps had non-finite losses or gradients (the last at step {step}); "
                f"{saved}; lower the learning rate, or raise --max-nonfinite-skips"
            )
        return True

    def check(self, step: int, model: torch.nn.Module, log: RunLog) -> None:
        """The ranks agree that losses, gradient norms and weights are finite up to ``step``. Collective
        (once per step: asked again at the same step, it answers from the last agreement).

        Called before every log line with a loss, every evaluation and every save, so nothing
        non-finite is ever reported as a result or written as a checkpoint.

        Raises:
            NonFiniteError: on every rank, naming the first bad step and the last good checkpoint.
        """
        if self._finite_at == step:
            return
        watchdog.mark("collective")
        verdict = self.guard.agree(step, model.parameters())
        if verdict.bad:
            log.record("nonfinite", verdict.first_step, what=verdict.describe())
            raise NonFiniteError(stop_message(verdict, self._last_good(), self.guard.skipped))
        self._finite_at = step

    def before_save(self, step: int, model: torch.nn.Module) -> Callable[[], None] | None:
        """A check for a save's own agreement between the ranks (None when the ranks agreed at ``step``
        already): it raises on a rank that saw anything non-finite, so the save fails on every rank with
        nothing written; :meth:`saved` or :meth:`after_failed_save` follows. Not collective."""
        if self._finite_at == step:
            return None

        def check() -> None:
            if not self.guard.locally_finite(model.parameters()):
                raise NonFiniteError(f"non-finite training on this rank by step {step}")

        return check

    def saved(self, step: int) -> None:
        """A save with :meth:`before_save`'s check succeeded: every rank found training finite at ``step``."""
        self._finite_at = step

    def after_failed_save(self, step: int, model: torch.nn.Module, log: RunLog) -> None:
        """After a save failed on every rank: :meth:`check` names a non-finite run as it would have before the
        save (the save's failure is raised when training is finite). Collective."""
        self.check(step, model, log)
