"""paratrain: one PyTorch training script, from one device to many GPUs and machines.

    import paratrain as pt
    rt = pt.Runtime(strategy="ddp", precision="bf16-mixed", seed=42)
    model, opt = rt.setup(model, opt)

See ``paratrain --help`` for the command line.
"""

from paratrain import comm
from paratrain.comm import (
    all_gather,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast_object,
    gather_object,
    get_logger,
    is_main,
    local_rank,
    main_first,
    print,
    rank,
    world_size,
)
from paratrain.errors import (
    CheckpointError,
    CollectiveTimeoutError,
    ConfigError,
    DataError,
    DistributedError,
    LaunchError,
    ParatrainError,
    WorkerError,
)
from paratrain.checkpoint import Checkpointer, CheckpointState
from paratrain.data import gather, make_loader
from paratrain.launch.spawn import spawn
from paratrain.metrics import RunningMean, accuracy, classification_report, global_mean
from paratrain.runtime.runtime import Runtime
from paratrain.loop import Callback, FitConfig, FitResult, Trainer, fit
from paratrain.runtime.seeding import rank_seed, seed_everything

__version__ = "0.1.0"

__all__ = [
    "Runtime",
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
]
