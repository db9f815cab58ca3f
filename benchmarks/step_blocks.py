"""Timed blocks of training steps, for the benchmarks that compare a per-step cost inside one job."""

from __future__ import annotations

import time
from typing import Any

import paratrain as pt
from paratrain.data.batches import move_to


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


class Replay:
    """The same few batches again and again: two blocks that compare a per-step cost run on
    the same data (a text batch's length, and so its step's time, varies from batch to batch)."""

    def __init__(self, batches: list[Any]):
        self.batches, self._next = batches, 0

    @classmethod
    def take(cls, source: Batches, count: int) -> Replay:
        return cls([source.next() for _ in range(count)])

    def next(self) -> Any:
        batch = self.batches[self._next % len(self.batches)]
        self._next += 1
        return batch


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


def seconds_per_step(rt: Any, task: Any, model: Any, optimizer: Any, batches: Batches | Replay, steps: int) -> float:
    """``steps`` training steps (forward, ``rt.backward``, ``rt.step``) between two barriers. Collective."""
    return times_per_step(rt, task, model, optimizer, batches, steps)[0]


def times_per_step(rt: Any, task: Any, model: Any, optimizer: Any, batches: Batches | Replay,
                   steps: int) -> tuple[float, float]:
    """``(wall, cpu)`` seconds per step of ``steps`` training steps between two barriers. Collective.

    ``cpu`` is this process's CPU time (all its threads: the main one, gloo's, a watchdog's):
    on a machine shared with other jobs it grows far less than the wall clock when they take
    the cores, so a small per-step cost stays visible in it.
    """
    pt.barrier()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss, _ = task.forward(model, move_to(batches.next(), rt.device))
        rt.backward(loss)
        rt.step(optimizer)
    pt.barrier()
    return (time.perf_counter() - start) / steps, (time.process_time() - cpu_start) / steps
