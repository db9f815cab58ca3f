"""Top-level workers for the elastic-trajectory tests: a tiny fit that stops at a chosen step, and the
comparisons of a resumed run with the uninterrupted one."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from pathlib import Path

import torch

import paratrain as pt

TRAIN_SAMPLES = 53  # global batch 12: 4 full batches and a short one of 5 per epoch


class StopAfter(pt.Callback):
    """Ask the loop to stop after ``step`` (it saves and returns, as a preempted run would)."""

    def __init__(self, step: int | None):
        self.step = step

    def on_step_end(self, trainer, step, loss):
        if self.step is not None and step >= self.step:
            trainer.should_stop = True


class FinalWeights(pt.Callback):
    def on_fit_end(self, trainer, result):
        state = trainer.runtime.full_state_dict(trainer.model)  # collective; whole tensors on rank 0 (fsdp too)
        self.weights = {k: v.flatten().tolist() for k, v in state.items()}


def dataset(n: int, seed: int) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=generator)
    return torch.utils.data.TensorDataset(x, ((x[:, 0] + x[:, 1] * x[:, 2]) > 0).long())


def fit_tiny(out_dir: str, stop_after: int | None, options: dict) -> dict:
    """pt.fit of a small MLP (no dropout, fp32) for 2 epochs; stops after ``stop_after`` steps when given."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    weights = FinalWeights()
    result = pt.fit(model, dataset(TRAIN_SAMPLES, 1), dataset(16, 2), out_dir=out_dir, epochs=2, lr=0.05,
                    log_every=1, progress=False, tensorboard=False, seed=7, callbacks=[StopAfter(stop_after), weights],
                    **options)
    return {**result.to_dict(), "weights": weights.weights}


def fit_text(out_dir: str, stop_after: int | None, options: dict) -> dict:
    """``text-cls`` (its small BERT has no dropout) with length grouping, for 1 epoch of 53 reviews;
    stops after ``stop_after`` steps when given."""
    from paratrain.tasks import TaskOptions

    weights = FinalWeights()
    result = pt.fit("text-cls", task_options=TaskOptions(limit_train=TRAIN_SAMPLES, limit_eval=16, max_len=32),
                    out_dir=out_dir, epochs=1, lr=1e-3, log_every=1, progress=False, tensorboard=False, seed=7,
                    group_by_length=True, callbacks=[StopAfter(stop_after), weights], **options)
    return {**result.to_dict(), "weights": weights.weights}


def fits_in_one_job(fits: list[tuple[str, str, int | None, dict]]) -> list[dict]:
    """Each ``(worker, out_dir, stop_after, options)`` of ``fits`` in turn (``worker``: ``"fit_tiny"`` or
    ``"fit_text"``), in this job's processes, under one process group that each fit joins: one start of
    the processes (torch's imports, the group) for all of them. Collective; rank 0's results, in order."""
    workers: dict[str, Callable[..., dict]] = {"fit_tiny": fit_tiny, "fit_text": fit_text}
    group = pt.Runtime(strategy="ddp")  # owns the process group; each fit's Runtime joins it
    try:
        return [workers[worker](out_dir, stop_after, options) for worker, out_dir, stop_after, options in fits]
    finally:
        gc.collect()
        group.close()


def step_losses(out_dir: Path) -> dict[int, float]:
    """The logged (all-ranks) loss of every step; a resumed attempt's record of a step wins."""
    losses = {}
    for line in (Path(out_dir) / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "train":
            losses[record["step"]] = record["loss"]
    return losses


def worst_relative(got: dict[str, list[float]], want: dict[str, list[float]]) -> float:
    """Largest difference of a tensor's entries, relative to that tensor's largest entry."""
    worst = 0.0
    for name, reference in want.items():
        scale = max(abs(v) for v in reference)
        worst = max(worst, max(abs(a - b) for a, b in zip(got[name], reference)) / scale)
    return worst
