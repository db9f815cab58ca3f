"""One evaluation pass of the fit loop: every dev sample once across ranks, the same forwards on every rank."""

from __future__ import annotations

import math
from typing import Any

import torch

from paratrain import comm
from paratrain.diagnostics import watchdog
from paratrain.data.batches import batch_length, move_to
from paratrain.tasks.api import Evaluation, Task


@torch.no_grad()
def evaluate(runtime: Any, task: Task, model: torch.nn.Module, eval_loader: Any) -> Evaluation:
    """Score ``model`` on ``eval_loader`` (an ``exact=True`` loader): mean loss and the task's metrics.
    Collective.

    Every rank runs the same number of forward passes: the exact shards may differ by
    one batch, and a wrapped model's forward can be a collective (FSDP gathers
    parameters, DDP broadcasts buffers on the first one), so a rank with fewer batches
    repeats one and discards the result. The model is left in training mode.
    """
    model.eval()
    evaluator = task.evaluator()
    loss_sum = torch.zeros((), dtype=torch.float64)
    count = 0
    batches = len(eval_loader)
    most = int(comm.all_reduce(batches, op="max"))
    last = None
    for batch in eval_loader:
        watchdog.mark("evaluation")
        last = batch  # from rt.loader: already on the device
        with runtime.autocast():
            loss, scores = task.forward(model, batch)
        evaluator.update(scores.float(), batch)
        size = batch_length(batch)
        loss_sum += loss.detach().double().cpu() * size
        count += size
    for _ in range(most - batches):
        if last is None:  # this rank's shard is empty (fewer dev samples than ranks)
            last = move_to(task.collate([eval_loader.dataset[0]]), runtime.device)
        with runtime.autocast():
            task.forward(model, last)
    result = evaluator.compute()
    totals = comm.all_reduce(torch.stack([loss_sum, torch.tensor(float(count), dtype=torch.float64)]), op="sum")
    metrics = {"loss": float(totals[0] / totals[1]) if totals[1] > 0 else math.nan, **result.metrics}
    model.train()
    return Evaluation(metrics=metrics, report=result.report)
