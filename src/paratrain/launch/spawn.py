"""``pt.spawn(fn, nprocs)``: run a function on N local processes through torch's elastic agent.

The detectron2 ``launch()`` / ``mp.spawn`` pattern (the DataParallel-to-DDP conversion post,
scripts that start one process per GPU from a function), without a hand-picked ``tcp://localhost:12345``: the
rendezvous listens on a loopback port the kernel picks, workers get the usual torchrun
variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and ``GLOO_SOCKET_IFNAME=lo``, and supervision
is torch.distributed's own.

Functions travel to the workers by value (cloudpickle), so a function defined in a
Jupyter cell, a closure or a lambda works: ``mp.spawn`` pickles functions by name, and
a fresh worker cannot import the notebook's ``__main__``. Workers still start with the
``spawn`` method, which is safe with CUDA and with the kernel's threads; ``fork`` is
offered for speed and refused once CUDA is initialised (a forked child cannot use it).
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import cloudpickle

from paratrain.env.cpu_binding import CPU_CORES_VAR, encode, node_plan
from paratrain.env.torchelastic import SPAWNED_VAR
from paratrain.errors import ConfigError
from paratrain.launch import network
from paratrain.launch.environ import scoped_environ
from paratrain.launch.failures import worker_error, worker_error_from_files
from paratrain.launch.loopback_store import LoopbackStore
from paratrain.launch.torch_logs import torch_log_level


#: The pid of the process that called pt.spawn, for its workers only (not kept in their environment).
SPAWN_PARENT_VAR = "PARATRAIN_SPAWN_PARENT"


def _worker(call: bytes, env: dict[str, str]) -> bytes:
    """Runs in each child. The agent wraps it in ``record``, which writes the
    exception and traceback to the error file that the parent reads. It first asks to die with
    the process that called ``pt.spawn`` (its parent), as ``paratrain run``'s workers do."""
    from paratrain.runtime.launcher_death import die_with_parent

    die_with_parent(int(env.pop(SPAWN_PARENT_VAR, "0")))
    os.environ.update(env)
    threads = env.get("OMP_NUM_THREADS")
    if threads and threads.isdigit():
        # The spawned child imported torch before this runs, so OMP_NUM_THREADS
        # alone comes too late for torch's intra-op pool.
        import torch

        torch.set_num_threads(int(threads))
    fn, args = cloudpickle.loads(call)
    # By value on the way back too: a result of a class defined in a notebook cell
    # cannot be pickled by name in a worker whose __main__ is not the notebook's.
    return cloudpickle.dumps(fn(*args))


def _pack(fn: Callable[..., Any], args: tuple) -> bytes:
    """``(fn, args)`` as bytes a fresh worker can load: by value unless importable.

    Raises:
        ConfigError: something ``fn`` refers to (a global, a closure cell, an argument)
            cannot be copied to another process; names it and the fix.
    """
    if not callable(fn):
        raise ConfigError(f"pt.spawn needs a function to run in the workers, got {type(fn).__name__} {fn!r}")
    try:
        return cloudpickle.dumps((fn, tuple(args)))
    except Exception as exc:  # pickling raises TypeError, PicklingError, AttributeError…
        name = getattr(fn, "__qualname__", repr(fn))
        raise ConfigError(
            f"{name} cannot be sent to the worker processes ({type(exc).__name__}: {exc}); it or its arguments "
            "capture an object that exists only in this process (a lock, an open file or socket, a generator): "
            "create it inside the function instead"
        ) from None


def _check_fork_is_safe(start_method: str) -> None:
    """Refuse ``fork`` from a process where torch already initialised CUDA.

    Only ``torch.cuda.is_initialized()`` is asked: it reads torch's own state. Asking
    ``torch.cuda.is_available()`` first would itself initialise the CUDA driver
    (``cudaGetDeviceCount`` calls ``cuInit``) and poison the fork it guards.
    """
    import torch

    if start_method == "fork" and torch.cuda.is_initialized():
        raise ConfigError(
            "CUDA was initialised in this process before pt.spawn forked workers, and a forked child cannot use it; "
            "use start_method='spawn' (the default), or restart the kernel and call pt.spawn before any CUDA work"
        )


def spawn(
    fn: Callable[..., Any],
    nprocs: int = 2,
    args: tuple = (),
    env: dict[str, str] | None = None,
    timeout: float = 600.0,
    start_method: str = "spawn",
    verbose: bool = False,
    cpu_binding: str = "auto",
) -> Any:
    """Call ``fn(*args)`` in ``nprocs`` new processes; return rank 0's return value.

    ``fn`` may be any function: module level, defined in a notebook cell, a closure
    or a lambda (it is sent by value; so are the notebook globals it uses, as they
    are now). Inside, ``pt.Runtime()`` joins the group, and ``rt.close()`` should end
    it. ``env`` is added to the workers' environment (after OMP_NUM_THREADS=1 and
    GLOO_SOCKET_IFNAME=lo, which it may override). ``start_method`` is ``"spawn"``
    (fresh interpreters) or ``"fork"``. ``verbose`` shows torch elastic's own log lines.
    ``cpu_binding="auto"`` gives each worker an equal share of the CPUs of its own, to which a
    CPU ``pt.Runtime`` binds its compute threads, as ``paratrain run`` does; ``"none"`` does not.

    Raises:
        ConfigError: ``nprocs`` < 1; ``fn`` or ``args`` cannot be copied to another
            process; ``fork`` after CUDA was initialised; a ``cpu_binding`` other than auto or none.
        WorkerError: a worker raised; the error names its rank, exception type and
            message and carries its traceback (the first failure by time).
        LaunchError: a worker died without an exception (signal, ``os._exit``).
    """
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig as ElasticConfig
    from torch.distributed.launcher.api import elastic_launch

    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ConfigError(f"nprocs must be a positive integer, got {nprocs!r}")
    if start_method not in ("spawn", "fork", "forkserver"):
        raise ConfigError(f"start_method {start_method!r} is not one of spawn, fork, forkserver")
    _check_fork_is_safe(start_method)
    call = _pack(fn, args)
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    shares = node_plan(cpu_binding, nprocs, int(threads) if threads.isdigit() else 1, setting="pt.spawn(cpu_binding=)")
    worker_env = {
        "OMP_NUM_THREADS": threads,
        # Gloo's pair sockets on loopback too (like the store), whatever the host name resolves to.
        "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME") or network.interface_for(network.LOOPBACK).name,
        SPAWNED_VAR: "1",  # a Runtime in the workers starts its hang watchdog
        SPAWN_PARENT_VAR: str(os.getpid()),  # each worker dies with this process
        **({CPU_CORES_VAR: encode(shares)} if shares and not os.environ.get(CPU_CORES_VAR) else {}),
        **(env or {}),
    }
    quiet = logging.INFO if verbose else logging.CRITICAL
    # The workers' error files in a folder of ours, readable when torch cannot report them (below).
    log_dir = tempfile.mkdtemp(prefix="paratrain-spawn-")
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
            logs_specs=DefaultLogsSpecs(log_dir=log_dir),
        )
        try:
            results = elastic_launch(config, _worker)(call, worker_env)
        except ChildFailedError as exc:
            raise worker_error(exc) from None
        except (EOFError, pickle.UnpicklingError):
            # torch.multiprocessing unpickles the traceback a failed worker writes as it exits; a
            # worker stopped while writing it leaves an empty file, and torch raises "Ran out of
            # input" in place of the failure. Every worker's exception is in the error file torch
            # elastic's record() wrote before that one.
            raise worker_error_from_files(log_dir) from None
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
    return cloudpickle.loads(results[0])
