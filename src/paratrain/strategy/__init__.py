"""Strategies by name: ``create_strategy("ddp", process, device, precision)``.

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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from paratrain.env import ProcessInfo
from paratrain.errors import ConfigError
from paratrain.strategy.api import Strategy
from paratrain.strategy.ddp import DDPStrategy
from paratrain.strategy.deepspeed import DeepSpeedStrategy
from paratrain.strategy.dp import DataParallelStrategy
from paratrain.strategy.fsdp import FSDPStrategy
from paratrain.strategy.single import SingleDeviceStrategy

if TYPE_CHECKING:
    from paratrain.precision import Precision

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (SingleDeviceStrategy, DataParallelStrategy, DDPStrategy, FSDPStrategy, DeepSpeedStrategy)
}

#: Options that only mean something with several processes (``auto`` drops them for one).
_SEVERAL_ONLY = ("grad_compression", "find_unused_parameters")


def choose_strategy(name: str, world_size: int, options: Mapping[str, Any] | None = None,
                    sync_batchnorm: bool = False, compile: bool = False) -> tuple[str, dict[str, Any]]:
    """The registered strategy that ``name`` means for ``world_size`` processes, and the options
    to build it with, checked (:meth:`Strategy.check`). Needs no process group.

    ``auto`` is ``ddp`` with more than one process, else ``single``; one process sends no
    gradients, so what was asked for a job of several (``grad_compression``,
    ``find_unused_parameters``) is dropped.

    Raises:
        ConfigError: unknown name (lists the valid ones), an option the strategy does
            not take, or a world size it cannot run.
        MissingDependencyError: the strategy needs a package that is not installed.
    """
    check_strategy_name(name)
    options = dict(options or {})
    if name == "auto":
        name = "ddp" if world_size > 1 else "single"
        if name == "single":
            for several_only in _SEVERAL_ONLY:
                options.pop(several_only, None)
    STRATEGIES[name].check(world_size, options, sync_batchnorm, compile)
    return name, options


def create_strategy(name: str, process: ProcessInfo, device: torch.device, precision: Precision,
                    sync_batchnorm: bool = False, compile: bool = False, **options: Any) -> Strategy:
    """The strategy called ``name`` (``auto`` picks from the world size) for ``process``,
    computing on ``device`` in ``precision``; checked first (:func:`choose_strategy`).

    Raises:
        ConfigError / MissingDependencyError: as :func:`choose_strategy`.
    """
    name, options = choose_strategy(name, process.world_size, options, sync_batchnorm, compile)
    return STRATEGIES[name](process, device, precision, sync_batchnorm=sync_batchnorm, compile=compile, **options)


def check_strategy_name(name: str) -> None:
    """Raises:
    ConfigError: ``name`` is neither ``auto`` nor a registered strategy (lists them).
    """
    if name != "auto" and name not in STRATEGIES:
        raise ConfigError(f"unknown strategy {name!r}; choose one of: auto, {', '.join(STRATEGIES)}")


__all__ = ["STRATEGIES", "Strategy", "check_strategy_name", "choose_strategy", "create_strategy"]
