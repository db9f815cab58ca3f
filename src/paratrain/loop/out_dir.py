"""The output directory of a run: refuse to mix two runs in it, or move an old one aside.

An output directory belongs to one task: ``task.json`` names it. Resuming
``digits`` from a ``text-cls`` checkpoint can only fail later with a wall of
missing keys, so it is refused up front with the two ways out.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from paratrain import comm
from paratrain.arguments import option
from paratrain.checkpoint.writer_lock import LOCK_FILE, WriterLock
from paratrain.loop.checkpoints import CHECKPOINT_DIR
from paratrain.diagnostics.failure_report import FAILURE_FILE, FAILURES_DIR
from paratrain.errors import CheckpointError, ConfigError, ParatrainError
from paratrain.tasks.api import TASK_FILE, DamagedTaskRecord, read_task_record
from paratrain.trackers.hub import tracker_files

# Everything paratrain writes into a run directory (its checkpoints, records, failure reports of
# earlier attempts, the writer lock); a folder holding only these is ours to resume in, so a
# rerun of the same command is never refused because of paratrain's own files.
WEIGHTS_FILE = "weights.safetensors"  # the final weights, written for the trackers that store files
RUN_FILES = {TASK_FILE, "logs", "metrics.jsonl", "tensorboard", "summary.json", "checkpoints",
             FAILURE_FILE, FAILURES_DIR, LOCK_FILE, WEIGHTS_FILE, *tracker_files()}


def prepare_out_dir(out_dir: str | Path, task: str, options: dict | None = None, fresh: bool = False,
                    model: str | None = None) -> tuple[Path, Path | None]:
    """Check (and with ``fresh``, clear) ``out_dir`` for a run of ``task``; create it.

    Returns ``(out_dir, moved_to)``: ``moved_to`` is where ``fresh`` moved the old
    run (nothing is deleted), else ``None``. Not collective: call it on one rank.
    ``model`` is the task's :meth:`~paratrain.tasks.Task.model_identity`.

    Raises:
        ConfigError: ``out_dir`` is a file or cannot be created; it holds another task's run, a run with
            another ``model_path`` or of another model (``pt.fit(model)``), or files that are not a run — each message says
            how to start fresh (another ``out_dir``, or ``fresh=True``; the CLI's flags under it).
    """
    out = Path(out_dir)
    _check_path(out)
    moved_to = None
    if fresh and out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir()):
        moved_to = _move_aside(out)
    elif out.is_dir():
        _check_same_run(out, task, options or {}, model)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # /proc/x, /dev/null/x, a read-only or full disk: one line, not a traceback
        raise ConfigError(f"cannot create {option('out_dir', str(out))} ({exc.strerror or exc}); pick a writable directory") from None
    return out, moved_to


def hold_out_dir(out_dir: str | Path) -> WriterLock:
    """This process's writer lock on ``out_dir`` (see :mod:`paratrain.checkpoint.writer_lock`);
    says so on stderr when it took over the lock of a run that died. Not collective.

    Raises:
        RunDirectoryBusyError: another live run writes there (named).
        ConfigError: the directory cannot be created.
    """
    _check_path(Path(out_dir))
    try:
        lock = WriterLock(out_dir).acquire()
    except OSError as exc:
        raise ConfigError(f"cannot create {option('out_dir', str(out_dir))} ({exc.strerror or exc}); pick a writable directory") from None
    if lock.took_over_text():
        print(f"paratrain: {lock.took_over_text()}", file=sys.stderr, flush=True)
    return lock


def _check_path(out: Path) -> None:
    """Refuse an ``out`` that is a file, or that the system cannot take (a name too long), in one line."""
    try:
        is_file = out.exists() and not out.is_dir()
    except OSError as exc:  # ENAMETOOLONG, ELOOP: Path.exists lets them through
        raise ConfigError(f"cannot use {option('out_dir', _short(out))} ({exc.strerror or exc}); pick a shorter "
                          "or another directory") from None
    if is_file:
        raise ConfigError(f"{option('out_dir', str(out))} is a file; give a directory")


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}…{text[-40:]} ({len(text)} characters)"


def _move_aside(out: Path) -> Path:
    """``--fresh``: move everything in ``out`` but the writer lock into ``OUT.old-<time>`` beside it
    (a rename: nothing is copied or deleted); return that folder.

    Raises:
        ConfigError: ``out`` is a mount point (its neighbour is on another file system, where a rename
            cannot go), or a rename failed (what moved stays in the new folder, named).
    """
    if os.path.ismount(out) or out.stat().st_dev != out.resolve().parent.stat().st_dev:
        raise ConfigError(f"{option('fresh', True)} cannot move the run in {out} aside: {out} is a mount point, and its "
                          f"neighbour {out.name}.old-… would be on another file system (a copy, not a move); move the "
                          f"old run yourself, or give a folder inside it as {option('out_dir')}")
    moved_to = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
    suffix = 1
    while moved_to.exists():
        moved_to = out.with_name(f"{out.name}.old-{time.strftime('%Y%m%d-%H%M%S')}-{suffix}")
        suffix += 1
    try:
        moved_to.mkdir()
        for entry in out.iterdir():  # the writer lock stays: this run holds it
            if entry.name != LOCK_FILE:
                entry.rename(moved_to / entry.name)
    except OSError as exc:
        raise ConfigError(f"{option('fresh', True)} could not move the run in {out} aside to {moved_to} "
                          f"({exc.strerror or exc}); what moved is in {moved_to}, the rest in {out}") from None
    return moved_to


def agree_on_out_dir(is_main: bool, out_dir: str | Path, task: str, options: dict, fresh: bool,
                     model: str | None = None) -> tuple[Path | None, WriterLock | None]:
    """Rank 0 takes the writer lock of ``out_dir`` (held until the caller releases it) and runs
    :func:`prepare_out_dir`; every rank gets its verdict: where ``fresh`` moved the old run (or
    ``None``), and rank 0 the lock. Collective.

    Raises:
        ConfigError / RunDirectoryBusyError: on every rank (the others would otherwise wait in the next collective).
    """
    verdict: tuple[Exception | None, Path | None] = (None, None)
    lock = None
    if is_main:
        try:
            lock = hold_out_dir(out_dir)
            verdict = (None, prepare_out_dir(out_dir, task, options, fresh, model)[1])
        except ParatrainError as exc:
            verdict = (exc, None)
        except OSError as exc:
            verdict = (ConfigError(f"cannot use {option('out_dir', str(out_dir))} ({exc}); pick a writable directory"), None)
        if verdict[0] is not None and lock is not None:
            lock.release()
            lock = None
    error, moved = comm.broadcast_object(verdict)
    if error is not None:
        raise error
    return moved, lock


def _check_same_run(out: Path, task: str, options: dict, model: str | None) -> None:
    how = f"use another {option('out_dir')} directory, or pass {option('fresh', True)} to move {out} aside and start over"
    try:
        record = read_task_record(out)
    except DamagedTaskRecord as exc:
        if not (out / CHECKPOINT_DIR).is_dir():
            raise
        # Its checkpoints are intact and check the model's keys and shapes when they load: set the
        # damaged record aside (never deleted) and let this run write it again.
        aside = out / f"{TASK_FILE}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
        (out / TASK_FILE).rename(aside)
        print(f"paratrain: warning: {str(exc).split('; use another')[0]}: moved it to {aside}; this run records its task "
              "again and resumes from its checkpoints (they are checked against the model as they load)",
              file=sys.stderr, flush=True)
        record = None
    if record is None:
        strangers = sorted(p.name for p in out.iterdir() if not _ours(p.name))
        if strangers:
            raise ConfigError(f"{option('out_dir', str(out))} already holds files that are not a paratrain run ({', '.join(strangers[:3])}); {how}")
        return
    if record["task"] != task:
        raise ConfigError(f"{option('out_dir', str(out))} holds checkpoints of task {record['task']!r}, not {task!r}; refusing to mix them; {how}")
    saved_path = (record.get("options") or {}).get("model_path")
    if saved_path != options.get("model_path"):
        raise ConfigError(
            f"{option('out_dir', str(out))} holds a run with {_model_path_text(saved_path)}, this one has "
            f"{_model_path_text(options.get('model_path'))}; refusing to mix them; {how}"
        )
    saved_model = record.get("model")
    if saved_model and model and saved_model != model:  # a record written before identities has none: resume decides
        raise ConfigError(f"{option('out_dir', str(out))} holds a run of another model, {saved_model}; this one is "
                          f"{model}; refusing to mix them; {how}")


def _ours(name: str) -> bool:
    """A file or folder paratrain writes in a run directory, or the temporary of one a kill interrupted."""
    return (name in RUN_FILES or (name.endswith(".tmp") and name[: -len(".tmp")] in RUN_FILES)
            or name.startswith(f"{TASK_FILE}.damaged-"))


def _model_path_text(path: str | None) -> str:
    """The model path as the user gave it, or that none was given (the task builds its own model)."""
    return option("model_path", path) if path else f"no {option('model_path')} (the task's own model)"


def directory_identity(out_dir: str | Path) -> tuple[int, int] | None:
    """``(device, inode)`` of ``out_dir``, None when it does not exist: a directory deleted (or moved
    away and made again) while a run writes into it has another one, or none."""
    try:
        status = Path(out_dir).stat()
    except OSError:
        return None
    return status.st_dev, status.st_ino


def check_still_there(out_dir: Path, identity: tuple[int, int] | None, step: int) -> None:
    """Refuse to go on writing when ``out_dir`` is no longer the directory this run started in.
    Not collective (run it on the writing rank inside ``on_all_ranks``).

    Raises:
        CheckpointError: it was deleted, or moved away (and another made in its place).
    """
    if identity is None or directory_identity(out_dir) == identity:
        return
    raise CheckpointError(f"{out_dir} was deleted or moved while this run wrote into it (at step {step}): its checkpoints, "
                      "metrics and logs are gone from there and nothing more is saved; put it back and run the "
                      "same command to resume, or run it again to start over")
