"""The workload every method trains, built inside a method's process from its ``BenchSpec``.

A method's script reads like its library's documentation; what it takes from here
is only what makes the comparison fair:

* the same task, datasets and collate (``wl.task``, ``wl.train_set``, ``wl.dev_set``);
* the same initial weights: ``wl.model()`` builds the task's model and loads the
  weights the bench wrote once (so no method depends on how its library seeds);
* the same data order and global batch: ``wl.train_set`` holds exactly
  ``steps × global_batch`` samples in the bench's order; read sequentially and
  split over ranks by any library's sampler, step *s* sees the same samples;
* the same optimizer at a constant learning rate: ``wl.optimizer(model)``;
* a :class:`~paratrain.bench.record.StepRecorder` for the figures.

Dropout is switched off: its random masks depend on how a batch is split over
devices, so with it two correct methods could not show the same per-step losses.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils.data import Subset

from paratrain.bench.record import StepRecorder
from paratrain.bench.spec import BenchSpec
from paratrain.errors import DataError
from paratrain.tasks.api import Task, TaskOptions


def training_order(train_size: int, steps: int, global_batch: int, seed: int) -> list[int]:
    """``steps × global_batch`` sample indices: shuffled epochs of the training set, one after another.

    Raises:
        DataError: the training set is empty (no number of epochs would fill the steps).
    """
    if train_size < 1:
        raise DataError("the training set is empty: there is nothing to train on")
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    while len(order) < steps * global_batch:
        order += torch.randperm(train_size, generator=generator).tolist()
    return order[: steps * global_batch]


def load_weights(model: torch.nn.Module, path: str | Path) -> torch.nn.Module:
    """Load a safetensors state dict into ``model`` (every key must match)."""
    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(path)), strict=True)
    return model


def without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
    return model


class Workload:
    """One method's view of the benchmark (see the module docstring)."""

    def __init__(self, spec: BenchSpec):
        from paratrain.tasks.task_ref import resolve_task

        self.spec = spec
        self.task: Task = resolve_task(spec.task, TaskOptions(**spec.task_options))
        train, self.dev_set = self.task.datasets()
        self.train_set = Subset(train, training_order(len(train), spec.steps, spec.global_batch, spec.seed))

    @classmethod
    def from_argv(cls, argv: list[str] | None = None) -> Workload:
        """The workload of ``script.py SPEC_FILE`` (the bench starts every script that way)."""
        argv = sys.argv[1:] if argv is None else argv
        return cls(BenchSpec.load(argv[0]))

    @property
    def steps(self) -> int:
        return self.spec.steps

    @property
    def precision(self) -> str:
        return self.spec.precision

    def option(self, name: str, default=None):
        return self.spec.options.get(name, default)

    def batch_size(self, world_size: int) -> int:
        """Samples per process per step."""
        return self.spec.batch_per_process(world_size)

    def model(self) -> torch.nn.Module:
        """The task's model with the bench's initial weights, dropout off, in train mode."""
        model = load_weights(self.task.build_model(), self.spec.init_weights)
        return without_dropout(model).train()

    def optimizer(self, model: torch.nn.Module, lr_scale: float = 1.0) -> torch.optim.Optimizer:
        """The task's optimizer at the bench's learning rate (constant: no schedule)."""
        return self.task.build_optimizer(model, self.spec.lr * lr_scale, self.spec.weight_decay)

    def recorder(self, rank: int, world_size: int, device: torch.device | str = "cpu",
                 memory_devices: list[torch.device] | None = None) -> StepRecorder:
        return StepRecorder(self.spec.work_dir, rank, world_size, self.spec.global_batch, device, memory_devices)

