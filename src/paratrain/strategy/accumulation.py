"""Gradient accumulation bookkeeping shared by every strategy.

``rt.accumulate(model, steps=4)`` counts micro-steps: on the first three the
gradient all-reduce is skipped (the strategy's ``no_sync``) and ``rt.step`` does
nothing; on the fourth, gradients are reduced once and the optimizer steps. The
loss is divided by ``steps`` inside ``rt.backward`` so the accumulated gradient is
the mean over all micro-batches, as one big batch would give (Accelerate does the
same). nanoGPT toggles ``require_backward_grad_sync`` by hand for the same reason:
an all-reduce per micro-step would cost ``steps`` times the communication.
"""

from __future__ import annotations

import torch

from paratrain.errors import ConfigError


class GradientAccumulation:
    """Where we are inside an accumulation cycle (one per strategy)."""

    def __init__(self) -> None:
        self.steps = 1
        self.active = False
        self.sync = True
        self._micro_step = 0

    def enter(self, steps: int, sync: bool | None) -> bool:
        """Start one micro-step; return whether its gradients must be synchronised.

        Raises:
            ConfigError: ``steps`` is not a positive integer.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError(f"accumulate(steps={steps!r}): steps must be a positive integer, e.g. steps=4")
        if self.active:
            raise ConfigError("accumulate() contexts cannot be nested; use one per micro-step")
        self.steps = steps
        if sync is None:
            self._micro_step += 1
            sync = self._micro_step % steps == 0
            if sync:
                self._micro_step = 0
        self.active = True
        self.sync = bool(sync)
        return self.sync

    def exit(self) -> None:
        self.active = False

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss / steps`` inside an accumulation context, else ``loss``."""
        return loss / self.steps if self.active and self.steps > 1 else loss

    @property
    def should_step(self) -> bool:
        """False on non-final micro-steps: the optimizer must wait for more gradients."""
        return not self.active or self.sync
