"""``pt.fit``: train a built-in task or your own model, without writing the loop.

    import paratrain as pt
    result = pt.fit("digits", epochs=5, out_dir="runs/digits")            # a built-in task
    pt.seed_everything(42)                                                # before building your model
    model = MyModel()
    result = pt.fit(model, train_ds, dev_ds, epochs=3, lr=3e-4, seed=42)  # your own model

Run the same script on N processes with ``paratrain run --nproc-per-node N script.py``:
``fit`` joins the process group through ``pt.Runtime``, shards the data, wraps the
model, and resumes from ``out_dir`` when a checkpoint is there — on any number of
processes: the run's global batch and data order do not depend on the world size
(:mod:`paratrain.data.global_order`), so a run resumed on 3 processes after 2 continues
the same trajectory (up to floating-point rounding; dropout and per-rank BatchNorm
statistics excepted).

``seed=`` seeds what ``fit`` draws (the data order, dropout); your model's initial
weights were drawn when you built it, so seed before building it for a repeatable
run. ``fit`` warns when it is given ``seed=S`` and the generator was not seeded with
``S`` before (it cannot see the order of your calls, so ``paratrain check`` looks too).
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
    from paratrain import comm
    from paratrain.env.no_restart import end_job_instead_of_restart
    from paratrain.errors import ConfigError, ParatrainError
    from paratrain.tasks.registry import create_task

    if lengths is not None and not isinstance(task, torch.nn.Module):
        raise ConfigError("lengths= goes with your own model (pt.fit(model, train, dev, lengths=...)); "
                          "a task gives its lengths through Task.sample_lengths")
    if isinstance(task, str):
        task = create_task(task, task_options)
    elif isinstance(task, torch.nn.Module):
        if runtime is None and (warning := unseeded_model_warning(config, options)):
            if comm.is_main():
                comm.get_logger().warning(warning)
        task = ModelTask(task, train_data, eval_data, forward=forward, collate_fn=collate_fn,
                         evaluator=evaluator, label_names=label_names, lengths=lengths)
    elif not isinstance(task, Task):
        raise ConfigError(f"fit() takes a task name, a Task or a torch.nn.Module, got {type(task).__name__}")
    config = (config or FitConfig()).with_options(**options)
    try:
        return Trainer(task, config, runtime=runtime, callbacks=callbacks).fit()
    except ParatrainError as exc:
        end_job_instead_of_restart(exc)  # under paratrain run: a restart would fail the same way
        raise


def unseeded_model_warning(config: FitConfig | None, options: dict[str, Any]) -> str | None:
    """The warning for ``pt.fit(model, seed=S)`` when the model's initial weights cannot depend on ``S``.

    ``fit`` seeds every generator with ``S`` when it starts, after the model was built. The
    model's weights followed ``S`` only if torch's generator was seeded with ``S`` before:
    ``torch.initial_seed()`` is the seed it was last given (``pt.seed_everything(S)``,
    ``pt.Runtime(seed=S)``, ``torch.manual_seed(S)``), a random number when it never was.
    Quiet when no seed was asked for (``fit``'s default seed promises nothing about a
    model it did not build); a model built *before* a matching seed is not seen here.
    """
    if "seed" in options:
        seed = options["seed"]
    elif config is not None and config.seed != FitConfig.seed:
        seed = config.seed
    else:
        return None
    if not isinstance(seed, int) or torch.initial_seed() == seed % 2**64:
        return None  # a bad seed value is the config check's to name
    return (f"pt.fit(seed={seed}) seeds the data order, not the model built before it: torch was not seeded with {seed} "
            f"then, so the initial weights do not follow seed={seed} (unseeded, they change from run to run); "
            f"call pt.seed_everything({seed}) before building the model")
