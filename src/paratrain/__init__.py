"""paratrain: one PyTorch training script, from one device to many GPUs and machines.

    import paratrain as pt
    rt = pt.Runtime(strategy="ddp", precision="bf16-mixed", seed=42)
    model, opt = rt.setup(model, opt)

See ``paratrain --help`` for the command line.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paratrain._version import __version__

# The public names, listed once: the imports below. Type checkers and IDEs read them as written; at run
# time they are not executed — ``_homes()`` reads them from this file, and ``__getattr__`` imports each
# name on first use (PEP 562), so that ``import paratrain`` and the command line start without torch:
# ``paratrain --help``, ``paratrain check`` and a refused flag answer at once, and torch is imported by
# what needs it. (Scientific Python's SPEC 1, "lazy loading", reads a stub file the same way.)
if TYPE_CHECKING:
    from paratrain.runtime.runtime import Runtime
    from paratrain.strategy.api import StepResult
    # strategies and precisions as objects (pt.Runtime(strategy=pt.DDP(find_unused_parameters=True))),
    # and the registries a new one joins
    from paratrain.strategy.ddp import DDPStrategy as DDP
    from paratrain.strategy.fsdp import FSDPStrategy as FSDP
    from paratrain.strategy.hsdp import HSDPStrategy as HSDP
    from paratrain.strategy.deepspeed import DeepSpeedStrategy as DeepSpeed
    from paratrain.strategy.single import SingleDeviceStrategy as SingleDevice
    from paratrain.strategy.dp import DataParallelStrategy as DataParallel
    from paratrain.precision.fp32 import FP32Precision as FP32
    from paratrain.precision.bf16 import BF16MixedPrecision as BF16Mixed
    from paratrain.precision.fp16 import FP16MixedPrecision as FP16Mixed
    from paratrain.strategy import Strategy, register_strategy
    from paratrain.precision import Precision, register_precision
    from paratrain.env import ClusterEnvironment, register_environment
    from paratrain.launch.spawn import spawn
    from paratrain.checkpoint import Checkpointer, CheckpointState
    from paratrain.loop import Callback, FitConfig, FitResult, Trainer, fit
    from paratrain.data import gather, make_loader
    from paratrain.metrics import RunningMean, accuracy, classification_report, global_mean
    from paratrain import comm
    from paratrain.comm import (
        all_gather, all_gather_object, all_reduce, barrier, broadcast_object, gather_object, get_logger,
        is_main, local_rank, main_first, print, rank, world_size,
    )
    from paratrain.seeding import rank_seed, seed_everything
    from paratrain.errors import (
        CheckpointError, CollectiveTimeoutError, ConfigError, DataError, DistributedError, LaunchError,
        NonFiniteError, ParatrainError, RunDirectoryBusyError, WorkerError,
    )


def _homes() -> dict[str, tuple[str, str]]:
    """``public name -> (module, attribute)``, read from the ``if TYPE_CHECKING:`` imports of this file."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    return {alias.asname or alias.name: (node.module, alias.name)
            for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}


_HOMES = _homes()
__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None and home[0] != __name__:  # a subpackage (pt.comm) is imported below
        module, attribute = home
        value = getattr(importlib.import_module(module), attribute)
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
