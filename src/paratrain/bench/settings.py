"""What a benchmark is asked, checked before anything is written or started, and the
environment every method's launcher starts in."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import paratrain
from paratrain.bench.machine import Machine
from paratrain.bench.methods import Method
from paratrain.errors import ConfigError, DataError
from paratrain.tasks.api import TaskOptions

LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                      "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")


@dataclass(frozen=True)
class BenchSettings:
    """What ``paratrain bench`` was asked; ``None`` fields take the task's recipe."""

    task: str
    methods: list[Method]
    out: Path
    nproc: int = 2
    steps: int = 60
    global_batch: int | None = None
    lr: float | None = None
    precision: str = "32-true"
    zero_stage: int = 2
    timeout_s: float = 900.0
    method_timeouts: dict[str, float] = field(default_factory=dict)
    seed: int = 42
    warmup_steps: int | None = None
    task_options: TaskOptions = field(default_factory=TaskOptions)
    command: list[str] = field(default_factory=list)
    repeats: int = 3
    min_time_s: float = 3.0
    baseline: str | None = None


def parse_timeouts(text: str, methods: list[str]) -> tuple[float, dict[str, float]]:
    """``"600,hf-trainer=1200"`` → ``(600.0, {"hf-trainer": 1200.0})``.

    Raises:
        ConfigError: a value is not a positive number, or names a method not being run.
    """
    default, overrides = 900.0, {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds > 0:
            raise ConfigError(f"--timeout {text!r}: {part!r} is not a positive number of seconds (write 600 or hf-trainer=1200)")
        if name and name not in methods:
            raise ConfigError(f"--timeout {text!r}: {name!r} is not one of the methods run ({', '.join(methods)})")
        if name:
            overrides[name] = seconds
        else:
            default = seconds
    return default, overrides


def check_nproc(nproc: int, machine: Machine, methods: list[Method]) -> None:
    """On a GPU machine every process of a multi-process method takes one GPU (and DataParallel
    splits over at most all of them), so more processes than GPUs cannot run.

    Raises:
        ConfigError: names the GPU count and the methods concerned.
    """
    if nproc < 1:
        raise ConfigError(f"--nproc-per-node must be at least 1, got {nproc}")
    if machine.gpu_count and nproc > machine.gpu_count:
        names = ", ".join(m.name for m in methods if m.multi_process or m.name == "dp")
        raise ConfigError(
            f"--nproc-per-node {nproc} is more than this machine's {machine.gpu_count} GPUs, and {names} use one GPU "
            f"per process; use --nproc-per-node {machine.gpu_count} or fewer"
        )


def check_out_dir(out: Path) -> None:
    """Create ``out`` if needed and prove a file can be written there.

    Raises:
        ConfigError: ``out`` cannot be created or written (says why).
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write to --out {out} ({exc.strerror or exc}); choose a writable directory") from None


def check_datasets(train_set, dev_set, task: str) -> None:
    """Before any method starts: a method cannot train on no samples, nor the bench score on none.

    Raises:
        DataError: names the empty set and the task.
    """
    for name, dataset in (("training", train_set), ("dev", dev_set)):
        if len(dataset) == 0:
            raise DataError(f"--task {task}: the {name} set is empty; check the task's data (--data, --limit-train, --limit-eval)")


def absolute_path(path: str | Path) -> Path:
    """``path`` as typed (``~`` expanded), made absolute against the current directory."""
    return Path(os.path.abspath(Path(path).expanduser()))


def settings_from_here(settings: BenchSettings) -> BenchSettings:
    """The paths a user typed, made absolute here: every method process starts in a folder
    of its own, where a relative ``--out`` or ``--data`` would name nothing."""
    options = settings.task_options
    return dataclasses.replace(
        settings,
        out=absolute_path(settings.out),
        task_options=dataclasses.replace(
            options, **{name: str(absolute_path(getattr(options, name)))
                        for name in ("data", "model_path") if getattr(options, name)}),
    )


def method_env(processes: int) -> dict[str, str]:
    """The environment a method's launcher starts in: this paratrain first on the path, no launcher
    variables of an outer job, and the cores shared among the method's processes."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    source = str(Path(paratrain.__file__).resolve().parents[1])  # this paratrain, whatever else is installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, os.getcwd(), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    if processes > 1 and "OMP_NUM_THREADS" not in os.environ:
        # What torchrun does for its own workers, for every launcher: N processes share the cores
        # instead of each starting a thread per core.
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // processes))
    return env
