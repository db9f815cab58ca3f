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
    # strategies and precisions as objects (pt.Runtime(strategy=pt.DDP(find_unused_parameters=True))),
    # and the registries a new one joins
    "DDP": "paratrain.strategy.ddp:DDPStrategy",
    "FSDP": "paratrain.strategy.fsdp:FSDPStrategy",
    "HSDP": "paratrain.strategy.hsdp:HSDPStrategy",
    "DeepSpeed": "paratrain.strategy.deepspeed:DeepSpeedStrategy",
    "SingleDevice": "paratrain.strategy.single:SingleDeviceStrategy",
    "DataParallel": "paratrain.strategy.dp:DataParallelStrategy",
    "FP32": "paratrain.precision.fp32:FP32Precision",
    "BF16Mixed": "paratrain.precision.bf16:BF16MixedPrecision",
    "FP16Mixed": "paratrain.precision.fp16:FP16MixedPrecision",
    **dict.fromkeys(("Strategy", "register_strategy"), "paratrain.strategy"),
    **dict.fromkeys(("Precision", "register_precision"), "paratrain.precision"),
    **dict.fromkeys(("ClusterEnvironment", "register_environment"), "paratrain.env"),
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
    from paratrain.env import ClusterEnvironment, register_environment
    from paratrain.precision import Precision, register_precision
    from paratrain.precision.bf16 import BF16MixedPrecision as BF16Mixed
    from paratrain.precision.fp16 import FP16MixedPrecision as FP16Mixed
    from paratrain.precision.fp32 import FP32Precision as FP32
    from paratrain.runtime.runtime import Runtime
    from paratrain.strategy import Strategy, register_strategy
    from paratrain.strategy.ddp import DDPStrategy as DDP
    from paratrain.strategy.deepspeed import DeepSpeedStrategy as DeepSpeed
    from paratrain.strategy.dp import DataParallelStrategy as DataParallel
    from paratrain.strategy.fsdp import FSDPStrategy as FSDP
    from paratrain.strategy.hsdp import HSDPStrategy as HSDP
    from paratrain.strategy.single import SingleDeviceStrategy as SingleDevice
    from paratrain.seeding import rank_seed, seed_everything
    from paratrain.strategy.api import StepResult


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None:
        module, _, attribute = home.partition(":")  # "module:Class" where the public name is shorter
        value = getattr(importlib.import_module(module), attribute or name)
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
    "DDP",
    "FSDP",
    "HSDP",
    "DeepSpeed",
    "SingleDevice",
    "DataParallel",
    "FP32",
    "BF16Mixed",
    "FP16Mixed",
    "Strategy",
    "Precision",
    "ClusterEnvironment",
    "register_strategy",
    "register_precision",
    "register_environment",
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
