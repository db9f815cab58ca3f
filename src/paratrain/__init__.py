"""paratrain: one PyTorch training script, from one device to many GPUs and machines.

    import paratrain as pt
    rt = pt.Runtime(strategy="ddp", precision="bf16-mixed", seed=42)
    model, opt = rt.setup(model, opt)

See ``paratrain --help`` for the command line.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from paratrain._version import __version__

#: Where each public name lives. They are imported on first use (PEP 562), so that
#: ``import paratrain`` and the command line start without torch: ``paratrain --help``,
#: ``paratrain check`` and a refused flag answer at once, and torch is imported by what
#: needs it.
_HOMES = {
    **dict.fromkeys(
        ("all_gather", "all_gather_object", "all_reduce", "barrier", "broadcast_object", "gather_object",
         "get_logger", "is_main", "local_rank", "main_first", "print", "rank", "world_size"),
        "paratrain.comm",
    ),
    **dict.fromkeys(
        ("CheckpointError", "CollectiveTimeoutError", "ConfigError", "DataError", "DistributedError",
         "LaunchError", "NonFiniteError", "ParatrainError", "RunDirectoryBusyError", "WorkerError"),
        "paratrain.errors",
    ),
    **dict.fromkeys(("Checkpointer", "CheckpointState"), "paratrain.checkpoint"),
    **dict.fromkeys(("gather", "make_loader"), "paratrain.data"),
    "spawn": "paratrain.launch.spawn",
    **dict.fromkeys(("RunningMean", "accuracy", "classification_report", "global_mean"), "paratrain.metrics"),
    "Runtime": "paratrain.runtime.runtime",
    "StepResult": "paratrain.strategy.api",
    **dict.fromkeys(("Callback", "FitConfig", "FitResult", "Trainer", "fit"), "paratrain.loop"),
    **dict.fromkeys(("rank_seed", "seed_everything"), "paratrain.seeding"),
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports these
    from paratrain import comm
    from paratrain.checkpoint import Checkpointer, CheckpointState
    from paratrain.comm import (
        all_gather, all_gather_object, all_reduce, barrier, broadcast_object, gather_object, get_logger,
        is_main, local_rank, main_first, print, rank, world_size,
    )
    from paratrain.data import gather, make_loader
    from paratrain.errors import (
        CheckpointError, CollectiveTimeoutError, ConfigError, DataError, DistributedError, LaunchError,
        NonFiniteError, ParatrainError, RunDirectoryBusyError, WorkerError,
    )
    from paratrain.launch.spawn import spawn
    from paratrain.loop import Callback, FitConfig, FitResult, Trainer, fit
    from paratrain.metrics import RunningMean, accuracy, classification_report, global_mean
    from paratrain.runtime.runtime import Runtime
    from paratrain.seeding import rank_seed, seed_everything
    from paratrain.strategy.api import StepResult


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value  # the next lookup is a plain one
        return value
    if not name.startswith("__"):  # a subpackage, as after an eager import: pt.comm, pt.tasks.TaskOptions
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))



__all__ = [
    "Runtime",
    "StepResult",
    "spawn",
    "Checkpointer",
    "CheckpointState",
    "fit",
    "Trainer",
    "FitConfig",
    "FitResult",
    "Callback",
    "make_loader",
    "gather",
    "global_mean",
    "RunningMean",
    "accuracy",
    "classification_report",
    "comm",
    "rank",
    "local_rank",
    "world_size",
    "is_main",
    "barrier",
    "main_first",
    "all_reduce",
    "all_gather",
    "all_gather_object",
    "broadcast_object",
    "gather_object",
    "print",
    "get_logger",
    "seed_everything",
    "rank_seed",
    "ParatrainError",
    "ConfigError",
    "LaunchError",
    "DistributedError",
    "CollectiveTimeoutError",
    "WorkerError",
    "DataError",
    "CheckpointError",
    "NonFiniteError",
    "RunDirectoryBusyError",
]
