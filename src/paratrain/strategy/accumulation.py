"""Gradient accumulation with one meaning, whichever way the micro-step is decided.

``k`` micro-batches of ``b`` samples train exactly like one batch of ``k·b``: the
gradients summed over the micro-batches are divided by the number of micro-batches
that really contributed to the step. Two ways to say which micro-step synchronises::

    with rt.accumulate(model, steps=4): ...              # counted: every 4th micro-step
    with rt.accumulate(model, sync=last_micro_step): ... # decided by the caller

On the other micro-steps the gradient all-reduce is skipped (the strategy's
``no_sync``) and ``rt.step`` does nothing. nanoGPT toggles ``require_backward_grad_sync``
by hand for the same reason: an all-reduce per micro-step costs ``steps`` times the
communication.

**Epoch boundaries.** A training loader made by ``rt.loader`` tells the strategy's
:class:`GradientAccumulation` where each batch sits in its pass over the data
(:meth:`GradientAccumulation.loader_batch`). The count restarts with every pass,
and the last batch of a pass always synchronises: with 7 batches and ``steps=2``
every epoch steps after batches 1, 3, 5 and 6, the last step averaging its one
micro-batch. So nothing pending crosses an epoch, and since ``Checkpointer.save``
refuses to save while gradients are pending (:meth:`GradientAccumulation.check_no_pending`),
nothing crosses a checkpoint either: a resumed run continues bit-exactly. A loop
over some other iterable decides the last micro-step itself with ``sync=``.

**Where the division happens.** Torch strategies divide the accumulated gradients
by the number of micro-batches at the step (after the precision unscales them), so a
short last cycle is scaled by its real size without knowing it in advance. Engines
that own the gradients (DeepSpeed) divide the loss in ``backward`` by the cycle's
size, known when it starts: ``steps``, or the batches left in the loader's pass.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from paratrain.errors import ConfigError


class GradientAccumulation:
    """Where we are inside an accumulation cycle (one per strategy)."""

    def __init__(self) -> None:
        self.steps: int | None = None
        self.active = False
        self.sync = True
        self._position = 0  # micro-steps of the current cycle so far (for counting)
        self._pending = 0  # micro-steps whose gradients wait for the next optimizer step
        self._cycle_size = 1  # micro-batches the current cycle will hold (loss division)
        self._batches_left: int | None = None  # batches of the loader's pass from this one on

    # ---- the loader's position (rt.loader calls these) -----------------------------------
    def loader_batch(self, index: int, total: int) -> None:
        """The training loader hands out batch ``index`` (0-based) of the ``total`` in its pass."""
        if index == 0:
            self._position = 0  # a new pass: the count restarts, whatever the last one left
        self._batches_left = total - index

    def loader_done(self) -> None:
        """The loader's pass ended (or the loop left it)."""
        self._batches_left = None

    # ---- one micro-step ------------------------------------------------------------------
    def enter(self, steps: int | None, sync: bool | None) -> bool:
        """Start one micro-step; return whether its gradients must be synchronised.

        Raises:
            ConfigError: ``steps`` is not a positive integer, ``sync`` is not a bool,
                or contexts are nested.
        """
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ConfigError(f"accumulate(steps={steps!r}): steps must be a positive integer, e.g. steps=4")
        if sync is not None and not isinstance(sync, bool):
            raise ConfigError(f"accumulate(sync={sync!r}): sync must be True or False (True on the last micro-step)")
        if self.active:
            raise ConfigError("accumulate() contexts cannot be nested; use one per micro-step")
        self.steps = steps
        if self._position == 0:
            size = steps or 1
            if self._batches_left is not None:
                size = min(size, self._batches_left)
            self._cycle_size = max(size, 1)
        self._position += 1
        if sync is None:
            sync = self._position % (steps or 1) == 0
        if self._batches_left == 1:
            sync = True  # the loader's last batch: flush, so nothing pending crosses the epoch
        if sync:
            self._position = 0
        self._pending += 1
        self.active = True
        self.sync = bool(sync)
        return self.sync

    def exit(self) -> None:
        self.active = False

    # ---- what the strategy does with it -----------------------------------------------------
    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss / cycle size`` inside an accumulation context, for engines that own the gradients."""
        return loss / self._cycle_size if self.active and self._cycle_size > 1 else loss

    @property
    def should_step(self) -> bool:
        """False on non-final micro-steps: the optimizer must wait for more gradients."""
        return not self.active or self.sync

    def take_pending(self) -> int:
        """Micro-batches accumulated into the gradients of this step; the count restarts."""
        pending, self._pending = self._pending, 0
        return pending

    @torch.no_grad()
    def average(self, parameters: Iterable[torch.Tensor]) -> None:
        """Divide the summed gradients by the micro-batches they hold (the mean of one big batch)."""
        micro_batches = self.take_pending()
        if micro_batches > 1:
            grads = [parameter.grad for parameter in parameters if parameter.grad is not None]
            if grads:
                torch._foreach_div_(grads, micro_batches)  # one kernel launch per dtype/device, not one per tensor

    @property
    def pending(self) -> int:
        """Micro-steps whose gradients have not been stepped yet."""
        return self._pending

    def check_no_pending(self, what: str) -> None:
        """Refuse ``what`` (a save, an evaluation) between micro-steps of one accumulated step.

        Raises:
        ConfigError: gradients of micro-steps wait for an optimizer step (``what`` would lose them).
        """
        if self._pending:
            raise ConfigError(
                f"{what} in the middle of gradient accumulation: {self._pending} micro-batch(es) have not been "
                "stepped yet; call it after the rt.step of the micro-step that synchronises"
            )
