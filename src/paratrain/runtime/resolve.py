"""The one step that turns a run's settings into what it runs on, checked together.

Strategy, precision, backend, device and TF32 are resolved from their names in this one
step (Lightning Fabric's ``_Connector`` is the model): ``auto`` becomes a concrete
strategy and backend, the strategy's options and the number of processes are checked
against each other, and the device is asked whether it computes in the precision.

:func:`resolve` needs no process group and starts nothing, so two places ask it the same
question: ``paratrain train`` in its launcher, with the world size its flags give
(``--nproc-per-node`` × ``--nnodes``), so that a typo or a strategy the job cannot run is
refused once, before any worker starts; and ``pt.Runtime`` in every worker, before it joins
the process group.

What a strategy needs to know about the precision it asks the precision object it is built
with (``fsdp_policy()``, ``deepspeed_config``), so no strategy keeps its own table of
precision names that a new precision could be missing from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from paratrain.arguments import check_type
from paratrain.env import ProcessInfo
from paratrain.precision import Precision, check_precision, precision_class
from paratrain.runtime.device import resolve_backend, resolve_device, use_device
from paratrain.strategy import Strategy, auto_reason, choose_strategy


@dataclass(frozen=True)
class RunSetup:
    """What a run resolved to: :func:`resolve`'s answer."""

    strategy: str  #: the strategy's name (``auto`` resolved by the world size)
    precision: str  #: the precision's name, supported on ``device``
    backend: str  #: ``gloo`` or ``nccl``
    #: this worker's device; in the launcher the workers' device type (``cuda`` has no index there)
    device: torch.device
    tf32: bool  #: float32 matmuls and convolutions in TF32 (only ever on CUDA)
    sync_batchnorm: bool
    compile: bool
    #: the options the strategy is built with (``auto`` drops those of several processes for one)
    strategy_options: Mapping[str, Any] = field(default_factory=dict)
    #: the classes named (or of the objects given): a user's own need not be registered
    strategy_class: type[Strategy] | None = None
    precision_class: type[Precision] | None = None
    #: why ``auto`` became ``strategy`` (the job's nodes and processes, an option that asks to shard);
    #: empty when a strategy was named
    auto_reason: str = ""


def resolve(
    strategy: str | Strategy = "auto",
    precision: str | Precision = "32-true",
    backend: str = "auto",
    *,
    world_size: int,
    num_nodes: int = 1,
    local_rank: int | None = None,
    tf32: bool = True,
    sync_batchnorm: bool = False,
    compile: bool = False,
    strategy_options: Mapping[str, Any] | None = None,
    call: str = "resolve()",
) -> RunSetup:
    """Resolve and check a run's settings for a job of ``world_size`` processes. Not collective.

    Args:
        num_nodes: the job's nodes (``auto`` shards inside nodes on several: ``hsdp``).
        strategy: a registered name or a built :class:`Strategy` (which brings its options).
        precision: a registered name or a :class:`Precision` object (its class is what counts).
        local_rank: this worker's rank on its node: its GPU is chosen and made current (the
            first CUDA call, before anything asks torch for "the current device", the bf16
            check included). ``None`` in the launcher: no GPU is chosen or touched, and the
            precision is checked on the device only where that is the CPU (a worker checks
            its own GPU).
        call: how the caller is named in an error about a value's type (``pt.Runtime()``).

    The order of the checks is the order a Runtime always had: backend, device, precision,
    strategy.

    Raises:
        ConfigError: a setting of the wrong type; an unknown backend, precision or strategy
            (each names the choices); nccl without CUDA; a local rank without a GPU; a precision
            the device cannot compute in; a strategy option it does not take or a world size it
            cannot run.
        MissingDependencyError: the strategy needs a package that is not installed.
    """
    for name, value, kind in (("strategy", strategy, Strategy), ("precision", precision, Precision)):
        if not isinstance(value, kind):
            check_type(call, name, value, "str")
    check_type(call, "backend", backend, "str")
    for name, value in (("sync_batchnorm", sync_batchnorm), ("compile", compile), ("tf32", tf32)):
        check_type(call, name, value, "bool")
    backend = resolve_backend(backend)
    device = resolve_device(backend, local_rank)
    if local_rank is not None:
        use_device(device)
    check_precision(precision, device if device.type != "cuda" or device.index is not None else None)
    strategy_cls, options = choose_strategy(strategy, world_size, strategy_options, sync_batchnorm, compile, num_nodes)
    precision_cls = precision_class(precision)
    return RunSetup(
        strategy=strategy_cls.name,
        precision=precision_cls.name,
        backend=backend,
        device=device,
        tf32=bool(tf32) and device.type == "cuda",
        sync_batchnorm=sync_batchnorm,
        compile=compile,
        strategy_options=MappingProxyType(options),
        strategy_class=strategy_cls,
        precision_class=precision_cls,
        auto_reason=auto_reason(world_size, num_nodes, dict(strategy_options or {})) if isinstance(strategy, str) and strategy == "auto" else "",
    )


def build_precision(setup: RunSetup) -> Precision:
    """The precision ``setup`` resolved to, on its device (already checked there)."""
    return setup.precision_class(setup.device)


def build_strategy(setup: RunSetup, process: ProcessInfo, precision: Precision) -> Strategy:
    """The strategy ``setup`` resolved to (its options already checked), given the process as
    the job's topology placed it, the device and ``precision``."""
    return setup.strategy_class(**setup.strategy_options).connect(process, setup.device, precision,
                                                 sync_batchnorm=setup.sync_batchnorm, compile=setup.compile)
