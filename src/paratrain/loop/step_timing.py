"""A training step's timing: when the fit loop logs, evaluates and saves, and how long its steps take.

* :class:`Cadence` — the timetable: at which steps a log line, an evaluation and a save are due, and
  at which step each was last done. Decisions only — no I/O, no communication: every rank takes the
  same ones from the same step numbers, so the collectives behind them (the loss all-reduce, the
  evaluation, the checkpoint) are entered together.
* :class:`TrainWindow` — loss and throughput between two log lines, with evaluation time paused out.
* :class:`StepClock` — the mean optimizer-step time over a few steps early in a run. The fit loop
  hands it to the strategy, which compares it with the link it measured (multi-node DDP):
  "communication bounds this job" is only worth saying with numbers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from paratrain.diagnostics import step_phases
from paratrain.loop.config import FitConfig

#: Steps a :class:`StepClock` times (after the first ones, which warm up: allocator, DDP's bucket rebuild).
WARMUP_STEPS, TIMED_STEPS = 3, 10


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


class Cadence:
    """The fit loop's timetable for ``config`` (``eval_every``, ``eval_per_epoch``, ``log_every``,
    ``save_every``) and its record of what was done at which step."""

    def __init__(self, config: FitConfig):
        self.config = config
        self.evaluated_at = -1
        self.saved_at = -1  # a resumed run starts at its checkpoint's step: never written twice
        self.saved_metrics_at = -1  # the last step saved with its evaluation's metrics
        #: ``save_every="auto"``: the checkpointer's answer (the interval agreed at every save)
        self.auto_due = None

    def evaluation_due(self, step: int, epoch_ends: bool, total_steps: int) -> bool:
        """An evaluation at ``step``: every ``eval_every`` steps, at an epoch's end (``eval_per_epoch``),
        and at the last step. A save at the same step always comes after it, so that checkpoint
        carries the metrics the best one is chosen by."""
        c = self.config
        return (bool(c.eval_every) and step % c.eval_every == 0) or (epoch_ends and c.eval_per_epoch) \
            or step >= total_steps

    def log_due(self, step: int, evaluation_due: bool, total_steps: int) -> bool:
        """A training line at ``step``: every ``log_every`` steps, with every evaluation, at the last step."""
        return evaluation_due or step % self.config.log_every == 0 or step >= total_steps

    def save_due(self, step: int) -> bool:
        """A ``save_every`` step not saved yet (by the evaluation at the same step)."""
        every = self.config.save_every
        if every == "auto":
            return self.auto_due is not None and self.auto_due(step) and self.saved_at != step
        return bool(every) and step % every == 0 and self.saved_at != step

    def epoch_save_due(self, step: int) -> bool:
        """A save at the end of an epoch: always, except under ``save_every="auto"``, whose interval comes from
        measurements and not from the epoch length — there only an evaluation's metrics are saved then."""
        if self.config.save_every == "auto":
            return self.evaluated_at == step and self.unsaved(step)
        return self.unsaved(step)

    def unsaved(self, step: int) -> bool:
        """No checkpoint of ``step`` yet, or one taken before its evaluation (without its metrics)."""
        return self.saved_at != step or (self.evaluated_at == step and self.saved_metrics_at != step)

    def evaluated(self, step: int) -> None:
        self.evaluated_at = step

    def saved(self, step: int, with_metrics: bool) -> None:
        self.saved_at = step
        self.saved_metrics_at = step if with_metrics else -1


class StepClock:
    """Times optimizer steps ``first + WARMUP_STEPS`` to ``first + WARMUP_STEPS + TIMED_STEPS``
    of this run (``first``: the step the run starts from, after a resume)."""

    def __init__(self) -> None:
        self._start: int | None = None
        self._clock = math.nan

    def after_step(self, step: int, train_seconds: float) -> float | None:
        """Note a finished ``step`` at ``train_seconds`` of training time; returns the mean
        seconds per step once, when the timed steps are done, else None."""
        if self._start is None:
            self._start = step + WARMUP_STEPS
        if step == self._start:
            self._clock = train_seconds
        elif step == self._start + TIMED_STEPS and not math.isnan(self._clock):
            return (train_seconds - self._clock) / TIMED_STEPS
        return None
