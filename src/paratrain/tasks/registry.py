"""Built-in tasks by name: ``create_task("digits", TaskOptions(...))``."""

from __future__ import annotations

from pathlib import Path

from paratrain.errors import ConfigError
from paratrain.tasks.api import Task, TaskOptions, read_task_record
from paratrain.tasks.digits import DigitsTask
from paratrain.tasks.mnist import MnistTask
from paratrain.tasks.seg import SegTask
from paratrain.tasks.text_cls import TextClsTask

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (TextClsTask, DigitsTask, MnistTask, SegTask)}


def task_class(name: str) -> type[Task]:
    """The task class called ``name``.

    Raises:
        ConfigError: unknown name (lists the built-in tasks).
    """
    try:
        return TASKS[name]
    except KeyError:
        listing = "; ".join(f"{key} ({cls.summary})" for key, cls in TASKS.items())
        raise ConfigError(f"unknown task {name!r}; built-in tasks: {listing}") from None


def create_task(name: str, options: TaskOptions | None = None) -> Task:
    """A new task called ``name`` with ``options``.

    Raises:
        ConfigError: unknown name (lists the built-in tasks) or a bad option.
    """
    return task_class(name)(options)


def load_task(directory: str | Path, trust_code: bool = False) -> Task:
    """The task saved in an output directory by a training run (for predict): a built-in
    one, or a user's task imported again from the reference its run recorded.

    A run folder may come from someone else, and its ``task.json`` names the code to import:
    a user's task is imported only with ``trust_code=True`` (``--trust-task-code``), and then
    only while its file still has the SHA-256 the run recorded.

    Raises:
        ConfigError: ``directory`` holds no ``task.json``; holds a ``pt.fit(model)`` run
            (only the user's code can build that model: says how to load the weights);
            names an unknown task, code not trusted (names the file), a task file changed
            since the run, or one that no longer imports.
    """
    record = read_task_record(directory)
    if record is None:
        raise ConfigError(f"{directory} holds no task.json; pass the --out directory of a `paratrain train` run")
    if record.get("reference"):
        from paratrain.tasks.task_ref import check_trusted, resolve_task

        check_trusted(str(record["reference"]), record.get("reference_sha256"), Path(directory), trust_code)

        task = resolve_task(record["reference"], TaskOptions(**record.get("options", {})))
        task.label_names = list(record.get("label_names") or task.label_names)
        return task
    if record["task"] == "model":  # ModelTask.name
        raise ConfigError(f"{directory} is a pt.fit(model) run, whose model only your code can build; "
                          f"{weights_advice(directory)}")
    return task_class(record["task"]).from_record(record, Path(directory))


def weights_advice(directory: str | Path) -> str:
    """How to use a run's weights without ``paratrain predict``: export them, load them into the model."""
    return (f"export its weights (paratrain ckpt export {directory} -o model.safetensors) and load them into your model: "
            "model.load_state_dict(safetensors.torch.load_file('model.safetensors'))")
