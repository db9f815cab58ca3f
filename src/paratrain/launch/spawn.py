"""``pt.spawn(fn, nprocs)``: run a function on N local processes through torch's elastic agent.

The detectron2 ``launch()`` / ``mp.spawn`` pattern (seeds 002 and 003), without a
hand-picked ``tcp://localhost:12345``: the rendezvous listens on a loopback port the
kernel picks, workers get the usual torchrun variables (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and ``GLOO_SOCKET_IFNAME=lo``, and supervision
is torch.distributed's own.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

from paratrain.errors import ConfigError
from paratrain.launch import network
from paratrain.launch.environ import scoped_environ
from paratrain.launch.failures import worker_error
from paratrain.launch.loopback_store import LoopbackStore
from paratrain.launch.torch_logs import torch_log_level


def _worker(fn: Callable[..., Any], args: tuple, env: dict[str, str]) -> Any:
    """Runs in each child. The agent wraps it in ``record``, which writes the
    exception and traceback to the error file that the parent reads."""
    os.environ.update(env)
    threads = env.get("OMP_NUM_THREADS")
    if threads and threads.isdigit():
        # The spawned child imported torch before this runs, so OMP_NUM_THREADS
        # alone comes too late for torch's intra-op pool.
        import torch

        torch.set_num_threads(int(threads))
    return fn(*args)


def spawn(
    fn: Callable[..., Any],
    nprocs: int = 2,
    args: tuple = (),
    env: dict[str, str] | None = None,
    timeout: float = 600.0,
    start_method: str = "spawn",
    verbose: bool = False,
) -> Any:
    """Call ``fn(*args)`` in ``nprocs`` new processes; return rank 0's return value.

    ``fn`` must be importable (defined at module top level) because workers are
    started with the ``spawn`` method. Inside, ``pt.Runtime()`` joins the group, and
    ``rt.close()`` should end it. ``env`` is added to the workers' environment
    (after OMP_NUM_THREADS=1 and GLOO_SOCKET_IFNAME=lo, which it may override).
    ``verbose`` shows torch elastic's own log lines.

    Raises:
        ConfigError: ``nprocs`` < 1 or ``fn`` is not a top-level function.
        WorkerError: a worker raised; the error names its rank, exception type and
            message and carries its traceback (the first failure by time).
        LaunchError: a worker died without an exception (signal, ``os._exit``).
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig as ElasticConfig
    from torch.distributed.launcher.api import elastic_launch

    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ConfigError(f"nprocs must be a positive integer, got {nprocs!r}")
    if getattr(fn, "__qualname__", "").count("<locals>") or getattr(fn, "__name__", "") == "<lambda>":
        raise ConfigError(f"{fn!r} is not picklable for the spawn start method; define it at module top level")
    worker_env = {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        # Gloo's pair sockets on loopback too (like the store), whatever the host name resolves to.
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME") or network.interface_for(network.LOOPBACK).name,
        **(env or {}),
    }
    quiet = logging.INFO if verbose else logging.CRITICAL
    with LoopbackStore(timeout_s=timeout) as store, torch_log_level(quiet), scoped_environ():
        config = ElasticConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=nprocs,
            run_id=f"paratrain-spawn-{uuid.uuid4().hex[:8]}",
            rdzv_backend="static",
            rdzv_endpoint=f"{store.address}:{store.port}",
            rdzv_configs={"rank": 0, "timeout": int(timeout)},
            max_restarts=0,
            start_method=start_method,
            monitor_interval=0.05,
        )
        try:
            results = elastic_launch(config, _worker)(fn, tuple(args), worker_env)
        except ChildFailedError as exc:
            raise worker_error(exc) from None
    return results[0]
