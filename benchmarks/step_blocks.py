"""Timed blocks of training steps, for the benchmarks that compare a per-step cost inside one job."""

from __future__ import annotations

import time
from typing import Any

import paratrain as pt
from paratrain.loop.batches import move_to


class Batches:
    """A loader's batches without end: a new pass starts when one ends."""

    def __init__(self, loader: Any):
        self.loader = loader
        self._batches = iter(loader)

    def next(self) -> Any:
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.loader)
            return next(self._batches)


def recipe_training(rt: Any, task_name: str) -> tuple[Any, Any, Any, Batches]:
    """``(task, model, optimizer, batches)``: a built-in task set up on ``rt`` with its recipe (2048
    training samples). Collective (``rt.setup``)."""
    from paratrain.tasks.api import TaskOptions
    from paratrain.tasks.registry import create_task

    task = create_task(task_name, TaskOptions(limit_train=2048, limit_eval=64))
    train_data, _ = task.datasets()
    model = task.build_model()
    optimizer = task.build_optimizer(model, task.recipe.lr, task.recipe.weight_decay)
    model, optimizer = rt.setup(model, optimizer)
    loader = rt.loader(train_data, task.recipe.batch_size, shuffle=True, collate_fn=task.collate)
    return task, model, optimizer, Batches(loader)


def seconds_per_step(rt: Any, task: Any, model: Any, optimizer: Any, batches: Batches, steps: int) -> float:
    """``steps`` training steps (forward, ``rt.backward``, ``rt.step``) between two barriers. Collective."""
    pt.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        loss, _ = task.forward(model, move_to(batches.next(), rt.device))
        rt.backward(loss)
        rt.step(optimizer)
    pt.barrier()
    return (time.perf_counter() - start) / steps
