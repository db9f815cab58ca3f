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


def load_task(directory: str | Path) -> Task:
    """The task saved in an output directory by a training run (for predict).

    Raises:
        ConfigError: ``directory`` holds no ``task.json``, or names an unknown task.
    """
    record = read_task_record(directory)
    if record is None:
        raise ConfigError(f"{directory} holds no task.json; pass the --out directory of a `paratrain train` run")
    return task_class(record["task"]).from_record(record, Path(directory))
