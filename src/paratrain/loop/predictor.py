"""Load a trained run for prediction: its task (vocabulary, model shape) and its best weights."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from paratrain.errors import CheckpointError, ConfigError
from paratrain.loop.checkpoints import CHECKPOINT_DIR, metric_mode
from paratrain.loop.result import SUMMARY_FILE
from paratrain.tasks.api import TASK_FILE, Prediction, Task
from paratrain.tasks.registry import load_task, weights_advice


@dataclass
class Predictor:
    task: Task
    model: torch.nn.Module
    checkpoint: Path

    def predict(self, inputs: list[str]) -> list[Prediction]:
        return self.task.predict(self.model, inputs)


def find_run_dir(path: Path) -> Path:
    """The run directory (holding ``task.json``) that ``path`` is or lies in; ``path`` when none."""
    for candidate in (path, *path.parents[:3]):
        if (candidate / TASK_FILE).is_file():
            return candidate
    return path


def load_predictor(path: str | Path, trust_task_code: bool = False) -> Predictor:
    """The task and model of a ``paratrain train`` run, for one process on the CPU.

    ``path`` is the run's output directory (its best checkpoint by the run's metric,
    else the newest) or one checkpoint inside it. Not collective.

    Raises:
        ConfigError: no ``task.json`` in or above ``path``; a task without ``predict`` (a
            ``pt.fit(model)`` run, a user's task that reads no raw inputs): says how to use the weights.
        CheckpointError: no usable checkpoint, or one that does not fit the model.
    """
    from paratrain.checkpoint import Checkpointer, read_model_state

    path = Path(path)
    run_dir = find_run_dir(path)
    task = load_task(run_dir, trust_code=trust_task_code)
    if type(task).predict is Task.predict:  # no reading of raw inputs: fail before loading any weights
        raise ConfigError(f"task {task.name!r} of {run_dir} has no predict(model, inputs), so paratrain predict cannot "
                          f"run it (text-cls has one; a Task of yours may define it); {weights_advice(run_dir)}")
    model = task.build_model()
    metric = _run_metric(run_dir, task)
    checkpoints = Checkpointer(None, run_dir / CHECKPOINT_DIR, best_metric=metric, mode=metric_mode(metric), model=model)
    target = path if path != run_dir else (checkpoints.best_path() or run_dir)
    # Only the weights: predicting needs no optimizer, data position or random state.
    weights, source = read_model_state(target, model="model")
    try:
        model.load_state_dict(weights)
    except RuntimeError as exc:
        raise CheckpointError(
            f"{source} does not fit the {task.name} model saved in {run_dir / TASK_FILE} "
            f"({str(exc).splitlines()[0]}); pass a checkpoint of this run"
        ) from None
    model.eval()
    return Predictor(task, model, Path(source))


def _run_metric(run_dir: Path, task: Task) -> str:
    """The metric the run ranked its checkpoints by (from its summary), else the task's default."""
    try:
        return str(json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))["metric"])
    except (OSError, ValueError, KeyError):
        return task.recipe.metric
