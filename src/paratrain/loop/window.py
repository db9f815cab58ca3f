"""``TrainWindow``: loss and throughput between two log lines, with evaluation time paused out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from paratrain.diagnostics import step_phases


def device_clock(device: torch.device) -> Callable[[], float]:
    """``time.perf_counter`` for work on ``device``: on CUDA it first waits for the work
    already queued there (kernels run asynchronously, so the host's clock alone reads
    when the work was *launched*, and samples/s would count steps the GPU has not done)."""
    if torch.device(device).type != "cuda":
        return time.perf_counter

    def now() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return now


class TrainWindow:
    """Counts this rank's training loss and the job's samples since the last log line.

    Time spent in evaluation, checkpoints and logging runs through :meth:`pause`
    and is left out of both the window's and the whole run's samples per second.
    Every clock read waits for ``device`` (:func:`device_clock`): on CUDA that is one
    synchronisation per optimizer step (the fit loop pauses after each), the price of
    a samples/s that the GPU really did.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._now = device_clock(torch.device(device))
        self.started = self._now()
        self.paused_seconds = 0.0
        self.samples_total = 0
        self._reset(self.started)

    def _reset(self, now: float) -> None:
        self._loss: torch.Tensor | None = None  # on the loss's device: no host sync per step
        self._batches = 0
        self._samples = 0
        self._start = now

    def add(self, loss: torch.Tensor | None, samples: int) -> None:
        """One micro-batch: its loss on this rank (``None``: a skipped step's, left out of the
        mean) and the samples all ranks trained on."""
        if loss is not None:
            value = loss.detach().double()
            self._loss = value if self._loss is None else self._loss + value
            self._batches += 1
        self._samples += samples
        self.samples_total += samples

    def take(self) -> tuple[torch.Tensor, float]:
        """``(mean loss of this rank, samples per second)`` since the last take; starts a new window."""
        now = self._now()
        loss = self._loss.cpu() if self._loss is not None else torch.zeros((), dtype=torch.float64)
        result = (loss / max(self._batches, 1), self._samples / max(now - self._start, 1e-9))
        self._reset(now)
        return result

    def pause(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` without counting its time as training."""
        step_phases.enter("device")  # the wait for the device below is the step's compute
        begin = self._now()
        step_phases.enter("paused")
        try:
            return fn(*args)
        finally:
            elapsed = self._now() - begin
            self.paused_seconds += elapsed
            self._start += elapsed

    @property
    def train_seconds(self) -> float:
        return self._now() - self.started - self.paused_seconds
