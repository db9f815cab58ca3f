"""Strategies by name: ``create_strategy("ddp", runtime=…)``.

=============  ==========================================================================
``auto``       ``ddp`` with more than one process, else ``single``
``single``     one device, no wrapper
``dp``         ``torch.nn.DataParallel`` over all GPUs of one process (legacy, comparison)
``ddp``        ``DistributedDataParallel``, one process per device
``fsdp``       FSDP2 ``fully_shard``: parameters, gradients, optimizer state sharded
``deepspeed``  DeepSpeed ZeRO 1-3 (``pip install 'paratrain[deepspeed]'``)
=============  ==========================================================================

This registry is the only place that knows the concrete classes.
"""

from __future__ import annotations

from typing import Any

from paratrain.errors import ConfigError
from paratrain.strategy.api import Strategy
from paratrain.strategy.ddp import DDPStrategy
from paratrain.strategy.deepspeed import DeepSpeedStrategy
from paratrain.strategy.dp import DataParallelStrategy
from paratrain.strategy.fsdp import FSDPStrategy
from paratrain.strategy.single import SingleDeviceStrategy

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (SingleDeviceStrategy, DataParallelStrategy, DDPStrategy, FSDPStrategy, DeepSpeedStrategy)
}


def create_strategy(name: str, runtime, **options: Any) -> Strategy:
    """Instantiate the strategy called ``name`` (``auto`` picks from the world size).

    Raises:
        ConfigError: unknown name (lists the valid ones), an option the strategy does
            not take, or a world size it cannot run.
        MissingDependencyError: the strategy needs a package that is not installed.
    """
    if name == "auto":
        name = "ddp" if runtime.process.world_size > 1 else "single"
        if name == "single":
            # One process sends no gradients: what was asked for a job of several has nothing to do.
            for several_only in ("grad_compression", "find_unused_parameters"):
                options.pop(several_only, None)
    check_strategy_name(name)
    return STRATEGIES[name](runtime=runtime, **options)


def check_strategy_name(name: str) -> None:
    """Raises:
    ConfigError: ``name`` is neither ``auto`` nor a registered strategy (lists them).
    """
    if name != "auto" and name not in STRATEGIES:
        raise ConfigError(f"unknown strategy {name!r}; choose one of: auto, {', '.join(STRATEGIES)}")


__all__ = ["STRATEGIES", "Strategy", "check_strategy_name", "create_strategy"]
