"""Strategies by name: the registry, and ``auto``.

=============  ==========================================================================
``auto``       ``ddp`` with more than one process, else ``single`` (takes ``ddp``'s options);
               asked to shard (an option of ``fsdp``'s): ``fsdp`` on one node, ``hsdp`` on several
``single``     one device, no wrapper
``dp``         ``torch.nn.DataParallel`` over all GPUs of one process (legacy, comparison)
``ddp``        ``DistributedDataParallel``, one process per device
``fsdp``       FSDP2 ``fully_shard``: parameters, gradients, optimizer state sharded
``deepspeed``  DeepSpeed ZeRO 1-3 (``pip install 'paratrain[deepspeed]'``)
``hsdp``       FSDP2 on a 2-D mesh: sharded inside a node, replicated across nodes
``ft-ddp``     per-step fault tolerance over replica groups (torchft; ``pip install 'paratrain[ft]'``)
``ft-fsdp``    ``ft-ddp`` with FSDP2 sharding the model inside each replica group
=============  ==========================================================================

A strategy registers itself with the :func:`register_strategy` decorator on its class. The
strategies that ship with paratrain are found by their files' presence: every module of this
package is imported once, with this one (``single``, ``dp``, ``ddp``, ``fsdp``, ``deepspeed``
first, in that order, then the others by name), so a new strategy is one new file. A user's
strategy registers the same way (``pt.register_strategy``), from any module the script imports.
This registry is the only place that maps names to classes.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from paratrain.env import ProcessInfo
from paratrain.errors import ConfigError
from paratrain.replica_environ import GROUP_ENV, LIGHTHOUSE_ENV, in_replica_group
from paratrain.strategy.api import Strategy, StrategyOptions

if TYPE_CHECKING:
    from paratrain.precision import Precision

#: Registered strategies by name, in registration order (help texts list them so).
STRATEGIES: dict[str, type[Strategy]] = {}

#: What ``auto`` becomes: with several processes, and with one; asked to shard, on one node and on several.
AUTO_SEVERAL, AUTO_ONE = "ddp", "single"
AUTO_SHARDED_ONE_NODE, AUTO_SHARDED_NODES = "fsdp", "hsdp"

_StrategyType = TypeVar("_StrategyType", bound=type)


def register_strategy(cls: _StrategyType) -> _StrategyType:
    """Class decorator: register a :class:`Strategy` subclass under its ``name``; returns it.

    Raises:
        ConfigError: ``cls`` is not a Strategy subclass with a ``name``, or the name is ``auto``.
    """
    name = getattr(cls, "name", None)
    if not (isinstance(cls, type) and issubclass(cls, Strategy)) or not isinstance(name, str) or name == "auto":
        raise ConfigError(f"register_strategy takes a Strategy subclass with a name other than 'auto', got {cls!r}")
    STRATEGIES[name] = cls
    return cls


def strategy_names() -> str:
    """``auto, single, dp, …``: every name a strategy setting takes, for help texts and errors."""
    return ", ".join(["auto", *STRATEGIES])


def strategy_class(strategy: str | Strategy) -> type[Strategy] | None:
    """The class of a strategy name or object (``auto`` and unknown names: None)."""
    if isinstance(strategy, Strategy):
        return type(strategy)
    return STRATEGIES.get(strategy)


def choose_strategy(strategy: str | Strategy, world_size: int, options: Mapping[str, Any] | None = None,
                    sync_batchnorm: bool = False, compile: bool = False, num_nodes: int = 1,
                    ) -> tuple[type[Strategy], dict[str, Any]]:
    """The strategy class that ``strategy`` (a name or a built object) means for ``world_size``
    processes on ``num_nodes`` nodes, and the options to build it with, checked
    (:meth:`Strategy.parse_options`, :meth:`Strategy.check`). Needs no process group.

    ``auto`` (:func:`auto_strategy`) is ``ddp`` with more than one process, else ``single``, and
    takes ``ddp``'s options; a model that asks to be sharded (an option only ``fsdp`` takes, such
    as ``min_params``) gets ``fsdp`` on one node and ``hsdp`` on several. One process sends no
    gradients, so what was asked for a job of several is dropped. A built object brings its own
    options (``options`` must then be empty).

    Raises:
        ConfigError: unknown name (lists the valid ones), an option the strategy does not take
            or a bad value, options given beside a built object, or a world size it cannot run.
        MissingDependencyError: the strategy needs a package that is not installed.
    """
    options = dict(options or {})
    if isinstance(strategy, Strategy):
        if options:
            raise ConfigError(f"give the options to the strategy object ({type(strategy).__name__}(...)), not beside "
                              f"it: {', '.join(sorted(options))}")
        cls, options = type(strategy), dict(strategy.given_options)
    else:
        check_strategy_name(strategy)
        if strategy == "auto":
            strategy = auto_strategy(world_size, num_nodes, options)
            options = options if world_size > 1 else {}
        cls = STRATEGIES[strategy]
    if not cls.joins_replica_groups and in_replica_group():
        raise ConfigError(replica_group_refusal(cls))
    cls.check(world_size, cls.parse_options(options), sync_batchnorm, compile)
    return cls, options


def replica_group_refusal(cls: type[Strategy]) -> str:
    """Why strategy ``cls`` cannot run in a replica group of ``paratrain run --fault-tolerance replicas``, and
    what does: one line."""
    joining = " and ".join(f"'{name}'" for name, c in STRATEGIES.items() if c.joins_replica_groups)
    why = (f"strategy '{cls.name}' runs here in a replica group ({LIGHTHOUSE_ENV} and {GROUP_ENV} are set, as "
           "paratrain run --fault-tolerance replicas sets them), but it would train each group alone and their "
           f"weights would part; only {joining} join the groups' steps")
    if cls.sharded_state:  # fsdp, hsdp: each process holds a shard of the model
        return (f"{why}: use strategy='ft-fsdp' to shard the model over each group's processes (FSDP2 inside the "
                "group, each shard all-reduced across groups), or 'ft-ddp' for a model that fits one device "
                "(docs/fault-tolerance.md)")
    return f"{why}: use strategy='ft-ddp' (docs/fault-tolerance.md)"


def auto_strategy(world_size: int, num_nodes: int, options: Mapping[str, Any]) -> str:
    """What ``auto`` is for a job of ``world_size`` processes on ``num_nodes`` nodes given ``options``.

    Raises:
        ConfigError: an option that neither ``ddp`` nor ``fsdp`` takes, or a bad value.
    """
    several, sharded = STRATEGIES[AUTO_SEVERAL], STRATEGIES[AUTO_SHARDED_ONE_NODE]
    unknown = sorted(set(options) - set(several.option_names()) - set(sharded.option_names()))
    if unknown:
        raise ConfigError(f"strategy 'auto' does not take {', '.join(unknown)}; it accepts {several.name}'s options "
                          f"({', '.join(several.option_names())}) or, to shard, {sharded.name}'s "
                          f"({', '.join(sharded.option_names())})")
    asks_to_shard = bool(set(options) - set(several.option_names()))
    (sharded if asks_to_shard else several).parse_options(options)  # their checks of the values
    if world_size < 2:
        return AUTO_ONE
    if asks_to_shard:
        return AUTO_SHARDED_NODES if num_nodes > 1 else AUTO_SHARDED_ONE_NODE
    return AUTO_SEVERAL


def auto_reason(world_size: int, num_nodes: int, options: Mapping[str, Any]) -> str:
    """Why ``auto`` is :func:`auto_strategy` for this job, in words for the run's first line
    (``2 nodes, and min_params asks to shard: sharded inside each node, replicated across them``)."""
    several = STRATEGIES[AUTO_SEVERAL]
    asked = sorted(set(options) - set(several.option_names()))
    if world_size < 2:
        return "one process"
    if not asked:
        return f"{world_size} processes, no option asks to shard"
    asks = f"{', '.join(asked)} ask{'s' if len(asked) == 1 else ''} to shard"
    if num_nodes > 1:
        return f"{num_nodes} nodes, and {asks}: sharded inside each node, replicated across them"
    return f"one node, and {asks}"


def create_strategy(strategy: str | Strategy, process: ProcessInfo, device: torch.device, precision: Precision,
                    sync_batchnorm: bool = False, compile: bool = False, **options: Any) -> Strategy:
    """The strategy ``strategy`` names (``auto`` picks from the world size), or a copy of the one
    given, checked first (:func:`choose_strategy`) and connected to ``process``, ``device`` and
    ``precision``.

    Raises:
        ConfigError / MissingDependencyError: as :func:`choose_strategy`.
    """
    cls, options = choose_strategy(strategy, process.world_size, options, sync_batchnorm, compile, process.num_nodes)
    return cls(**options).connect(process, device, precision, sync_batchnorm=sync_batchnorm, compile=compile)


def check_strategy_name(name: str) -> None:
    """Accept ``name`` when it is ``auto`` or a registered strategy.

    Raises:
    ConfigError: ``name`` is neither ``auto`` nor a registered strategy (lists them).
    """
    if name != "auto" and name not in STRATEGIES:
        raise ConfigError(f"unknown strategy {name!r}; choose one of: {strategy_names()}")


def _import_builtin_strategies() -> None:
    first = ("single", "dp", "ddp", "fsdp", "deepspeed")  # the order help texts list them in
    others = sorted(module.name for module in pkgutil.iter_modules(__path__) if module.name not in first)
    for module in (*first, *others):
        importlib.import_module(f"{__name__}.{module}")


_import_builtin_strategies()

__all__ = ["STRATEGIES", "Strategy", "StrategyOptions", "auto_reason", "check_strategy_name", "choose_strategy", "create_strategy",
           "register_strategy", "strategy_class", "strategy_names"]
