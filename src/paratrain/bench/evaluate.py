"""Every method's final weights, scored on the whole dev set by the same code, in the bench's process.

Each sample is scored exactly once (no padding, no duplicate samples from a
distributed sampler), with the task's own evaluator, so the accuracy column
compares the trained models and not the methods' evaluation loops.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader

from paratrain.bench.workload import load_weights
from paratrain.tasks.api import Task


@torch.no_grad()
def evaluate_weights(task: Task, dev_set, weights: Path, batch_size: int) -> dict[str, float]:
    """The task's dev metrics (and the mean dev ``loss``) of the model in ``weights``.

    Raises:
        RuntimeError, OSError: the file does not hold this task's model.
    """
    model = load_weights(task.build_model(), weights).eval()
    evaluator = task.evaluator()
    loss_sum, count = 0.0, 0
    for batch in DataLoader(dev_set, batch_size=batch_size, shuffle=False, collate_fn=task.collate):
        loss, scores = task.forward(model, batch)
        evaluator.update(scores, batch)
        n = len(scores)
        loss_sum += float(loss) * n
        count += n
    metrics = dict(evaluator.compute().metrics)
    metrics["loss"] = loss_sum / max(count, 1)
    return metrics
