"""``pt.fit``: train a built-in task or your own model, without writing the loop.

    import paratrain as pt
    result = pt.fit("digits", epochs=5, out_dir="runs/digits")            # a built-in task
    result = pt.fit(model, train_ds, dev_ds, epochs=3, lr=3e-4)           # your own model

Run the same script on N processes with ``paratrain run --nproc-per-node N script.py``:
``fit`` joins the process group through ``pt.Runtime``, shards the data, wraps the
model, and resumes from ``out_dir`` when a checkpoint is there — on any number of
processes: the run's global batch and data order do not depend on the world size
(:mod:`paratrain.data.global_order`), so a run resumed on 3 processes after 2 continues
the same trajectory (up to floating-point rounding; dropout and per-rank BatchNorm
statistics excepted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from paratrain.loop.callbacks import Callback
from paratrain.loop.config import FitConfig
from paratrain.loop.model_task import ModelTask
from paratrain.loop.result import FitResult
from paratrain.loop.trainer import Trainer
from paratrain.tasks.api import Evaluator, Task, TaskOptions


def fit(
    task: Task | str | torch.nn.Module,
    train_data: Any = None,
    eval_data: Any = None,
    *,
    config: FitConfig | None = None,
    runtime: Any = None,
    callbacks: list[Callback] | tuple[Callback, ...] = (),
    task_options: TaskOptions | None = None,
    forward: Callable[[torch.nn.Module, Any], tuple[torch.Tensor, torch.Tensor]] | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    evaluator: Callable[[], Evaluator] | None = None,
    label_names: list[str] | None = None,
    lengths: Any = None,
    **options: Any,
) -> FitResult:
    """Train and evaluate; return the :class:`FitResult` (on every rank). Collective.

    Args:
        task: a built-in task name (``"text-cls"``, ``"digits"``, ``"mnist"``, ``"seg"``),
            a :class:`~paratrain.tasks.Task`, or your ``torch.nn.Module``.
        train_data, eval_data: map-style datasets, with a model only.
        config: a :class:`FitConfig`; ``**options`` are its fields and override it
            (``epochs=``, ``max_steps=``, ``lr=``, ``out_dir=``, ``strategy=``, …).
        runtime: an existing ``pt.Runtime``; by default one is created from the
            config and closed at the end.
        callbacks: :class:`Callback` objects, called on every rank.
        task_options: options of a built-in task given by name (``data=``, ``limit_train=``…).
        forward, collate_fn, evaluator, label_names: with a model only; see
            :class:`~paratrain.loop.model_task.ModelTask`.
        lengths: with a model only: each training sample's length (e.g. tokens), so
            that batches group similar lengths and pad little (``group_by_length``).

    Raises:
        ConfigError: an unknown task or option, a bad value, or an output
            directory that holds another run.
        DataError, MissingDependencyError, CheckpointError: from the layers below.
    """
    from paratrain.errors import ConfigError
    from paratrain.tasks.registry import create_task

    if lengths is not None and not isinstance(task, torch.nn.Module):
        raise ConfigError("lengths= goes with your own model (pt.fit(model, train, dev, lengths=...)); "
                          "a task gives its lengths through Task.sample_lengths")
    if isinstance(task, str):
        task = create_task(task, task_options)
    elif isinstance(task, torch.nn.Module):
        task = ModelTask(task, train_data, eval_data, forward=forward, collate_fn=collate_fn,
                         evaluator=evaluator, label_names=label_names, lengths=lengths)
    elif not isinstance(task, Task):
        raise ConfigError(f"fit() takes a task name, a Task or a torch.nn.Module, got {type(task).__name__}")
    config = (config or FitConfig()).replace(**FitConfig.check_names(options))
    return Trainer(task, config, runtime=runtime, callbacks=callbacks).fit()
