"""A task as the command line names it: a built-in name, ``package.module:attr`` or ``path/to/file.py:attr``.

One reading for ``paratrain train TASK`` and ``paratrain bench --task TASK``.
``attr`` may be a :class:`~paratrain.tasks.api.Task` subclass (built with the
task options), a task object, or a function that returns one. A module path is
imported with the current directory on ``sys.path`` (as ``python -m`` would), so
``examples.my_task:TASK`` works from a checkout; a file path (relative to the
current folder, ``~`` expanded) works from anywhere.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path

from paratrain.errors import ConfigError
from paratrain.tasks.api import Task, TaskOptions

# What the fit loop and the bench call on a task; each must be defined.
REQUIRED = ("datasets", "collate", "build_model", "forward", "evaluator")


def is_user_ref(ref: str) -> bool:
    return ":" in ref


def absolute_ref(ref: str) -> str:
    """The same reference, with a file path made absolute (method processes run elsewhere)."""
    if not is_user_ref(ref):
        return ref
    target, attr = ref.rsplit(":", 1)
    if _is_path(target):
        return f"{Path(_with_suffix(target)).expanduser().resolve()}:{attr}"
    return ref


def label(ref: str) -> str:
    """A name for the default output folder: the built-in name, or the module's (or file's) name and the
    attribute (``my_task-TASK``), so that two tasks of one name in different files keep apart."""
    if not is_user_ref(ref):
        return ref
    target, attr = ref.rsplit(":", 1)
    stem = Path(_with_suffix(target)).stem if _is_path(target) else target.rsplit(".", 1)[-1]
    return f"{stem}-{attr}" if stem else attr


def resolve_task(ref: str, options: TaskOptions) -> Task:
    """The task ``ref`` names, built with ``options``.

    Raises:
        ConfigError: unknown built-in name (lists them); a module or file that does not
            import (names the import error); a missing attribute; an object that is not a
            task (names the methods it lacks).
    """
    if not is_user_ref(ref):
        from paratrain.tasks.registry import create_task

        return create_task(ref, options)
    target, attr = ref.rsplit(":", 1)
    if not target or not attr:
        raise ConfigError(f"--task {ref!r}: write module:attr or path/to/file.py:attr")
    module = _import(target, ref)
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"--task {ref!r}: {module.__name__} has no attribute {attr!r}") from None
    task = _as_task(obj, options, ref)
    task.reference = absolute_ref(ref)
    return task


def _is_path(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


def _with_suffix(target: str) -> str:
    return target if target.endswith(".py") else target + ".py"


def _import(target: str, ref: str):
    try:
        if _is_path(target):
            path = Path(_with_suffix(target)).expanduser().resolve()
            if not path.is_file():
                raise ConfigError(f"--task {ref!r}: no file {path}")
            name = f"paratrain_user_task_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses and pickling look the module up by name
            spec.loader.exec_module(module)
            return module
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        return importlib.import_module(target)
    except ConfigError:
        raise
    except Exception as exc:  # the user's module: any error while importing it is theirs to see
        raise ConfigError(f"--task {ref!r} does not import: {type(exc).__name__}: {exc}") from None


def _as_task(obj, options: TaskOptions, ref: str) -> Task:
    if inspect.isclass(obj) and _missing(obj):
        raise ConfigError(f"--task {ref!r}: class {obj.__name__} is not a task, it lacks {', '.join(_missing(obj))}")
    if inspect.isclass(obj) or (callable(obj) and _missing(obj)):  # a class or a factory: given the options if it takes them
        try:
            obj = obj(options) if inspect.signature(obj).parameters else obj()
        except ConfigError:
            raise  # the task's own one-line refusal (an option it does not use) names the fix already
        except Exception as exc:
            raise ConfigError(f"--task {ref!r}: calling it to make a task raised {type(exc).__name__}: {exc}") from None
    missing = _missing(obj)
    if missing:
        raise ConfigError(
            f"--task {ref!r} is not a task: {type(obj).__name__} lacks {', '.join(missing)} "
            "(subclass paratrain.tasks.api.Task; see examples/my_task.py)"
        )
    if not isinstance(obj, Task):
        raise ConfigError(
            f"--task {ref!r}: {type(obj).__name__} has the task methods but is not a paratrain.tasks.api.Task; "
            "subclass it (it brings recipe, label_names, build_optimizer and check)"
        )
    return obj


def _missing(obj) -> list[str]:
    missing = []
    for name in REQUIRED:
        member = getattr(obj, name, None)
        if not callable(member) or getattr(member, "__isabstractmethod__", False):
            missing.append(f"{name}()")
    return missing


def reference_file(ref: str) -> Path | None:
    """The file a ``path/to/file.py:attr`` reference names (None for a module or built-in name)."""
    if not is_user_ref(ref):
        return None
    target = ref.rsplit(":", 1)[0]
    return Path(_with_suffix(target)).expanduser().resolve() if _is_path(target) else None


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def check_trusted(ref: str, recorded_sha256: str | None, run_dir: Path, trust_code: bool) -> None:
    """Refuse to import the code a run folder's ``task.json`` names unless the user said so, naming it first.

    Raises:
        ConfigError: ``trust_code`` is False (names the file or module, and its SHA-256); or the file no
            longer has the SHA-256 the run recorded (it changed since the run trained).
    """
    path = reference_file(ref)
    digest = file_sha256(path) if path is not None else None
    what = f"{path} (sha256 {digest[:16]}…)" if digest else f"module {ref.rsplit(':', 1)[0]}"
    if not trust_code:
        raise ConfigError(f"{run_dir}/task.json names Python code to import: {what}, attribute {ref.rsplit(':', 1)[1]!r}; "
                          "paratrain runs a run folder's code only when told: read it, then pass --trust-task-code "
                          "(pt.tasks.load_task(..., trust_code=True))")
    if recorded_sha256 and digest != recorded_sha256:
        raise ConfigError(f"{what} is not the task file the run in {run_dir} trained with (its sha256 was "
                          f"{recorded_sha256[:16]}…): it changed since; restore it, or train again")
