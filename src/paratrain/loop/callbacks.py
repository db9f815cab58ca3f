"""User callbacks: hooks the fit loop calls on every rank at fixed points.

Subclass :class:`Callback` and override what you need; pass instances to
``pt.fit(..., callbacks=[...])``. Hooks run on *every* rank, in the same order,
so a hook may call collectives (all ranks reach it together). To write files or
print, check ``trainer.runtime.is_main``.

A hook may set ``trainer.should_stop = True``: the loop stops at its next
logging or evaluation point once *any* rank asked (the request is all-reduced,
so the ranks stop together instead of leaving one waiting in a collective).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from paratrain.loop.result import FitResult
    from paratrain.loop.trainer import Trainer
    from paratrain.tasks.api import Evaluation


class Callback:
    """Does nothing by default; override the hooks you need."""

    def on_fit_start(self, trainer: Trainer) -> None:
        """After setup and resume, before the first step (``trainer.state.step`` is where it resumes)."""

    def on_step_end(self, trainer: Trainer, step: int, loss: torch.Tensor) -> None:
        """After optimizer step ``step`` (1-based); ``loss`` is this rank's last micro-batch loss, detached."""

    def on_eval_end(self, trainer: Trainer, evaluation: Evaluation) -> None:
        """After an evaluation; ``evaluation.metrics`` are global (identical on every rank)."""

    def on_checkpoint(self, trainer: Trainer, step: int) -> None:
        """After a checkpoint was written at ``step``."""

    def on_epoch_end(self, trainer: Trainer, epoch: int) -> None:
        """After epoch ``epoch`` (0-based) and its evaluation."""

    def on_fit_end(self, trainer: Trainer, result: FitResult) -> None:
        """After the last step, the last checkpoint and the summary."""


class CallbackList:
    """Calls one hook on every callback, in order."""

    def __init__(self, callbacks: list[Callback] | tuple[Callback, ...] = ()):
        self.callbacks = list(callbacks)

    def __call__(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(*args)
