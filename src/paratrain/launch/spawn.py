"""``pt.spawn(fn, nprocs)``: run a function on N local processes through torch's elastic agent.

The detectron2 ``launch()`` / ``mp.spawn`` pattern (seeds 002 and 003), without a
hand-picked ``tcp://localhost:12345``: the rendezvous listens on a loopback port the
kernel picks, workers get the usual torchrun variables (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and supervision is torch.distributed's own.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from typing import Any

from paratrain.errors import ConfigError, LaunchError, WorkerError
from paratrain.launch.loopback_store import LoopbackStore


def _worker(fn: Callable[..., Any], args: tuple, env: dict[str, str]) -> Any:
    """Runs in each child. The agent wraps it in ``record``, which writes the
    exception and traceback to the error file that the parent reads."""
    os.environ.update(env)
    return fn(*args)


def spawn(
    fn: Callable[..., Any],
    nprocs: int = 2,
    args: tuple = (),
    env: dict[str, str] | None = None,
    timeout: float = 600.0,
    start_method: str = "spawn",
) -> Any:
    """Call ``fn(*args)`` in ``nprocs`` new processes; return rank 0's return value.

    ``fn`` must be importable (defined at module top level) because workers are
    started with the ``spawn`` method. Inside, ``pt.Runtime()`` joins the group.

    Raises:
        ConfigError: ``nprocs`` < 1 or ``fn`` is not a top-level function.
        WorkerError: a worker raised; the error names its rank, exception type and
            message and carries its traceback (the first failure by time).
        LaunchError: a worker died without an exception (signal, ``os._exit``).
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if not isinstance(nprocs, int) or nprocs < 1:
        raise ConfigError(f"nprocs must be a positive integer, got {nprocs!r}")
    if getattr(fn, "__qualname__", "").count("<locals>") or getattr(fn, "__name__", "") == "<lambda>":
        raise ConfigError(f"{fn!r} is not picklable for the spawn start method; define it at module top level")
    worker_env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {})}
    with LoopbackStore(timeout_s=timeout) as store:
        config = LaunchConfig(
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
        saved_env = dict(os.environ)
        try:
            results = elastic_launch(config, _worker)(fn, tuple(args), worker_env)
        except ChildFailedError as exc:
            raise _worker_error(exc) from None
        finally:
            # The agent exports TORCHELASTIC_* into this process; the caller's
            # environment must come back as it was.
            os.environ.clear()
            os.environ.update(saved_env)
    return results[0]


def _worker_error(exc) -> Exception:
    """Turn torch's ChildFailedError into a WorkerError for the first failed rank."""
    rank, failure = exc.get_first_failure()
    data = failure.error_file_data or {}
    message = data.get("message")
    if isinstance(message, str):  # some torch versions store the JSON as a string
        try:
            message = json.loads(message)
        except ValueError:
            message = {"message": message}
    if isinstance(message, dict) and message.get("message"):
        text = str(message["message"])
        tb = str(message.get("extraInfo", {}).get("py_callstack", ""))
        exc_type, _, detail = text.partition(": ")
        return WorkerError(rank, exc_type.strip(), detail.strip(), tb)
    return LaunchError(
        f"rank {rank} (pid {failure.pid}) died with exit code {failure.exitcode} "
        f"{'(' + failure.signal_name() + ')' if failure.exitcode < 0 else ''} without a Python exception; "
        "look at its output above"
    )
