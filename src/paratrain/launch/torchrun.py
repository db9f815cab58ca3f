"""Run a :class:`LaunchConfig` on torch.distributed.run's elastic agent, in this process.

Like Lightning Fabric's CLI, we build torchrun's argv and call
``torch.distributed.run.main(argv)``: restarts, rendezvous, worker supervision and
failure records are torch's. What we add is what torchrun leaves to the user:

* one node, no port given: a free port, and a rendezvous store and gloo sockets on
  loopback only (:mod:`paratrain.launch.loopback_store`, ``GLOO_SOCKET_IFNAME=lo``);
* several nodes: ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` set to the interface that
  routes to the master (otherwise gloo resolves the host name, often to 127.0.0.1,
  and the other node gets "Connection refused");
* ``OMP_NUM_THREADS`` always set, ``PARATRAIN_BACKEND`` for the workers' Runtime,
  ``--local_rank`` for legacy scripts, and one-line errors instead of torch's reports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from paratrain.diagnostics.failure_report import oom_kill_count
from paratrain.env import cpu_binding
from paratrain.env.no_restart import END_SIGNAL
from paratrain.env.torchelastic import LAUNCHER_PID_VAR, LINE_PREFIX_VAR, PROGRESS_TTY_VAR
from paratrain.errors import LaunchError
from paratrain.goodput import ledger
from paratrain.launch import console_tee, network, worker_site
from paratrain.launch.config import DEFAULT_C10D_PORT, DEFAULT_MASTER_PORT, LaunchConfig
from paratrain.launch.environ import scoped_environ
from paratrain.launch.failures import (ended_without_restart, exit_hint, is_rendezvous_error, lost_node, rendezvous_error,
                                       script_failure, stopped_by, workers_recorded)
from paratrain.launch.legacy import local_rank_argument
from paratrain.launch.rendezvous_wait import RendezvousWait, awaited
from paratrain.launch.restart_notice import RestartNotice
from paratrain.launch.torch_logs import torch_log_level

SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
CLEAR_LINE = console_tee.CLEAR_LINE


def torchrun_argv(
    config: LaunchConfig, master_port: int | None, run_id: str, log_dir: str | None = None, local_addr: str | None = None
) -> list[str]:
    """The argv for ``torch.distributed.run.main``.

    ``master_port`` is the port actually used (the loopback store's on one node);
    ``log_dir`` where the workers' streams go (``--log-dir``, or a temporary folder for
    prefixed output).
    """
    log_dir = log_dir or config.log_dir
    argv = [
        f"--nnodes={config.min_nodes}:{config.max_nodes}",
        f"--nproc-per-node={config.nproc_per_node}",
        f"--max-restarts={config.max_restarts}",
        f"--rdzv-backend={config.rdzv_backend}",
        f"--rdzv-id={run_id}",
    ]
    if config.rdzv_backend == "static":
        conf = {"timeout": str(config.rdzv_timeout)}
        argv += [
            f"--node-rank={config.node_rank}",
            f"--master-addr={config.master_addr or network.LOOPBACK}",
            f"--master-port={master_port}",
        ]
    else:
        conf = {"join_timeout": str(config.rdzv_timeout)}
        if config.rdzv_last_call:
            conf["last_call_timeout"] = str(config.rdzv_last_call)
        if config.multi_node and not config.rdzv_endpoint and config.rdzv_backend == "c10d":
            # The endpoint is --master-addr: node 0 hosts the store. torch would guess from the
            # host name, which need not resolve to that address (containers, several interfaces).
            conf["is_host"] = "true" if config.node_rank == 0 else "false"
        argv.append(f"--rdzv-endpoint={rendezvous_endpoint(config)}")
    conf.update(_pairs(config.rdzv_conf))  # the user's --rdzv-conf wins, key by key
    argv.append("--rdzv-conf=" + ",".join(f"{key}={value}" for key, value in conf.items()))
    local_addr = config.local_addr or (local_addr if config.rdzv_backend != "static" else None)
    if local_addr:
        # Workers meet at the address rank 0's agent announces, by default its host name,
        # which may resolve to another interface: announce the one that routes to node 0.
        argv.append(f"--local-addr={local_addr}")
    if log_dir:
        argv.append(f"--log-dir={log_dir}")
    if config.redirects is not None or config.tee is not None:
        # The user's stream choices, as torchrun takes them.
        argv += [f"--redirects={config.redirects or '0'}", f"--tee={config.tee or '0'}"]
    elif config.prefixed_output or config.log_dir:
        # 3 = stdout and stderr of every local rank; tee keeps them on the console too, whole
        # lines at a time with the [rankN]: prefix, so two ranks never share a line.
        argv += ["--redirects=3", "--tee=3"]
    if config.local_ranks_filter is not None:
        argv.append(f"--local-ranks-filter={','.join(map(str, config.local_ranks_filter))}")
    argv += list(config.torch_flags)
    if config.module:
        argv.append("--module")
    if config.no_python:
        argv.append("--no-python")
    argv.append(config.target)
    if config.legacy_local_rank:
        # Before the script's own arguments, where torch.distributed.launch put it.
        argv.append(local_rank_argument(config.legacy_local_rank, config.target, config.module))
    argv += list(config.target_args)
    return argv


def _pairs(conf: str | None) -> dict[str, str]:
    """``"a=1,b=2"`` → {"a": "1", "b": "2"} (validated by LaunchConfig)."""
    pairs = (pair.split("=", 1) for pair in (conf or "").split(",") if pair.strip())
    return {key.strip(): value.strip() for key, value in pairs}


def run_id_for(config: LaunchConfig) -> str:
    """``--rdzv-id``, else torchrun's: a fresh UUID where torchrun makes its own local store (one
    node without ``--master-port``, or ``--standalone``), else ``none``."""
    local_store = not config.multi_node and config.master_port is None
    return config.rdzv_id or (str(uuid.uuid4()) if local_store else "none")


def rendezvous_endpoint(config: LaunchConfig) -> str:
    """``HOST:PORT`` for a non-static rendezvous (c10d, etcd)."""
    if config.rdzv_endpoint:
        return config.rdzv_endpoint
    if config.master_addr:
        return f"{config.master_addr}:{config.master_port or DEFAULT_C10D_PORT}"
    return f"{network.LOOPBACK}:0"  # one node: torchrun's --standalone does the same


def threads_per_proc(config: LaunchConfig, environ: Mapping[str, str]) -> int:
    """``--threads-per-proc``, else the user's OMP_NUM_THREADS, else cores // local processes."""
    if config.threads_per_proc:
        return config.threads_per_proc
    if environ.get("OMP_NUM_THREADS", "").isdigit() and int(environ["OMP_NUM_THREADS"]) > 0:
        return int(environ["OMP_NUM_THREADS"])
    cores = len(cpu_binding.usable_cpus())
    return max(1, cores // config.nproc_per_node)


def socket_interface(config: LaunchConfig) -> network.Interface:
    """The interface gloo/NCCL sockets should use: loopback on one node, else the route to the master.

    Raises:
        LaunchError: no route to the master.
    """
    return network.interface_for(network.LOOPBACK if config.loopback_only else config.rendezvous_host)


def worker_env(config: LaunchConfig, environ: Mapping[str, str], interface: network.Interface) -> dict[str, str]:
    """Variables to add to the workers' environment (what the user set is kept)."""
    threads = threads_per_proc(config, environ)
    env = {"OMP_NUM_THREADS": str(threads), LAUNCHER_PID_VAR: str(os.getpid())}
    shares = cpu_shares(config, threads)
    if shares and not environ.get(cpu_binding.CPU_CORES_VAR):
        env[cpu_binding.CPU_CORES_VAR] = cpu_binding.encode(shares)
    if config.backend != "auto" or not environ.get("PARATRAIN_BACKEND"):
        env["PARATRAIN_BACKEND"] = config.backend  # --backend wins; without it, the user's variable stays
    for var in SOCKET_IFNAME_VARS:
        if not environ.get(var):
            env[var] = interface.name
    if config.stall_timeout is not None:
        env["PARATRAIN_STALL_TIMEOUT"] = f"{config.stall_timeout:g}"
    terminal = console_terminal()
    if config.prefixed_output and not environ.get(LINE_PREFIX_VAR):
        # torch elastic's template; its default says [default0]:
        env[LINE_PREFIX_VAR] = (CLEAR_LINE if terminal else "") + "[rank${rank}]:"
    if config.prefixed_output and terminal and config.node_rank == 0 and (
        config.local_ranks_filter is None or 0 in config.local_ranks_filter
    ):
        env[PROGRESS_TTY_VAR] = terminal
    return env


#: torch's switch for the dynamic rendezvous' shared worker store (see :func:`rendezvous_env`).
SHARED_STORE_VAR = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def rendezvous_env(config: LaunchConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """Variables for torch's agent in this launcher (a user's own setting is kept).

    With a node range (c10d rendezvous) torch by default gives the workers of every round one
    store, hosted by the agent that was rank 0 first, and publishes its address only in the
    first round. A node that leaves and is started again (a new agent) waits in the next round
    for that address, which is never published again, while node 0 waits for the newcomer:
    both fail at the rendezvous timeout (pytorch/pytorch#147064). The same store also keeps the
    dead workers' gloo addresses, which a restarted group would dial. Without sharing, every
    round publishes a fresh address and its workers' rank 0 hosts a fresh store (as
    ``init_process_group("env://")`` does when ``TORCHELASTIC_USE_AGENT_STORE`` is not True).
    """
    # One node: the same agent serves every round, so nothing can miss the address.
    if config.rdzv_backend == "static" or config.max_nodes <= 1 or environ.get(SHARED_STORE_VAR):
        return {}
    return {SHARED_STORE_VAR: "1"}


def console_terminal() -> str | None:
    """The terminal this launcher writes to (stdout and stderr both on it), else None."""
    try:
        if sys.stdout.isatty() and sys.stderr.isatty():
            return os.ttyname(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return None


def launch(config: LaunchConfig) -> int:
    """Start this node's workers through torch's elastic agent and wait for them.

    Collective across nodes: every node's ``paratrain run`` must start within the
    rendezvous timeout. Returns 0 when every worker succeeded.

    Raises:
        LaunchError: a worker failed (names the first failed rank, its exit code and
            log), the master did not answer, or the rendezvous timed out (names the
            address and port).
    """
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    run_id = run_id_for(config)
    with contextlib.ExitStack() as stack:
        port = config.master_port
        if config.loopback_only and config.rdzv_backend == "static":
            from paratrain.launch.loopback_store import LoopbackStore

            port = stack.enter_context(LoopbackStore(timeout_s=config.rdzv_timeout, port=port or 0)).port
        elif config.rdzv_backend == "static":
            port = port or DEFAULT_MASTER_PORT
        if config.multi_node and config.node_rank == 0 and config.rdzv_backend == "static":
            network.require_own_address(config.rendezvous_host)  # node 0 hosts the store there
        interface = socket_interface(config)
        env = worker_env(config, os.environ, interface)
        env.update(rendezvous_env(config, os.environ))
        if ledger.LAUNCH_TIME_ENV not in env:  # the workers' goodput ledger counts start-up from here
            env[ledger.LAUNCH_TIME_ENV] = repr(ledger.process_start_time() or time.time())
        stacks_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="paratrain-stacks-"))
        env.update(worker_site.stacks_env(stacks_dir, os.environ))  # stacks of the workers it stops
        # Without --log-dir, a scratch folder: the prefixed console's copy of the streams, and the
        # workers' error files (torch's own default is an unnamed temporary folder), read after a signal.
        log_dir = config.log_dir or tempfile.mkdtemp(prefix="paratrain-logs-")
        if config.restarts_by_default:
            _info(
                f"--nnodes {config.min_nodes}:{config.max_nodes} is a node range: the group restarts up to "
                f"{config.max_restarts} times when a node or worker is lost (torchrun's default is 0: give "
                "--max-restarts 0 for it)"
            )
        oversubscribed = oversubscription(config, env)
        if oversubscribed:
            _info(oversubscribed)
        if cpu_binding.CPU_CORES_VAR in env:
            shares = cpu_binding.describe(cpu_binding.decode(env[cpu_binding.CPU_CORES_VAR]))
            _info(f"each CPU worker computes on CPUs of its own: {shares} (bound once it joins the process group, "
                  "through pt.Runtime or init_process_group: its main thread and the threads it starts after; "
                  "gloo's threads keep every CPU; --cpu-binding none leaves them all to the scheduler)")
        argv = torchrun_argv(config, port, run_id, log_dir, interface.address if config.multi_node else None)
        if config.multi_node:
            static = config.rdzv_backend == "static"
            stack.enter_context(RendezvousWait(
                awaited(config.node_rank, config.min_nodes, config.max_nodes, static),
                f"{config.master_addr}:{port}" if static else rendezvous_endpoint(config), config.rdzv_timeout,
            ))
        if config.multi_node and config.rdzv_backend == "static" and config.node_rank > 0:
            network.wait_for_listener(config.master_addr, port, config.rdzv_timeout)
        if config.multi_node and any(var in env for var in SOCKET_IFNAME_VARS):
            exported = " ".join(f"{var}={interface.name}" for var in SOCKET_IFNAME_VARS if var in env)
            _info(
                f"network interface {interface.name} ({interface.address}) routes to the master "
                f"{config.rendezvous_host}; workers get {exported} (set them yourself to choose another)"
            )
        if config.verbose:
            _info("torchrun " + " ".join(argv))
        stack.enter_context(scoped_environ(env))
        # Read into the config already; torch would read it again and turn our one-node store into its own.
        os.environ.pop("PET_STANDALONE", None)
        if config.warm_workers:  # started with the workers' environment; the workers get its socket
            from paratrain.launch.warm_pool import WarmPool

            os.environ.update(stack.enter_context(WarmPool()).env)
        stack.enter_context(torch_log_level(logging.INFO if config.verbose else logging.CRITICAL))
        oom_kills_before = oom_kill_count()
        console_tee.install()  # --tee writes a line in parts behind separate tags otherwise
        stack.enter_context(RestartNotice(_info, lambda local_rank: _log_file(log_dir, run_id, local_rank)))
        # A worker whose error a restart would repeat asks this launcher to end the job.
        previous_end = signal.signal(END_SIGNAL, _end_requested) if _in_main_thread() else None
        try:
            torchrun.main(argv)
        except ChildFailedError as exc:
            error = script_failure(
                exc, lambda local_rank: _log_file(log_dir, run_id, local_rank), lambda code: exit_hint(config, code),
                oom_kills_before, lambda ranks, peer: lost_node(config, ranks, peer),
                lambda rank: worker_site.stacks_at_stop(stacks_dir, rank), config.nproc_per_node,
            )
            _drop_scratch(config, log_dir, keep=error.report.first.log is not None)
            raise _with_exit_code_mode(config, error) from None
        except SignalException as exc:  # the agent turns SIGTERM/SIGINT/... into this after stopping the workers
            if exc.sigval == END_SIGNAL:
                error = ended_without_restart(_log_root(log_dir, run_id))
            else:
                error = stopped_by(exc.sigval, preempted=workers_recorded(_log_root(log_dir, run_id), "PreemptedError"))
            _drop_scratch(config, log_dir)
            raise _with_exit_code_mode(config, error) from None
        except Exception as exc:
            _drop_scratch(config, log_dir)
            if not is_rendezvous_error(exc):
                raise
            raise _with_exit_code_mode(config, rendezvous_error(config, _rendezvous_where(config, port), exc)) from None
        finally:
            if previous_end is not None:
                signal.signal(END_SIGNAL, previous_end)
    if config.log_dir:
        _info(
            f"per-rank logs: {_log_root(config.log_dir, run_id) or config.log_dir}/attempt_*/<local rank>/{{stdout,stderr}}.log"
        )
    else:  # our own scratch copy of what the console showed; a failure names it, so it stays then
        _drop_scratch(config, log_dir)
    return 0


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _end_requested(signum: int, frame) -> None:
    from torch.distributed.elastic.multiprocessing.api import SignalException

    # As torch's own handler does for SIGTERM: the agent stops the workers, then it reaches launch().
    raise SignalException(f"a worker asked to end the job (signal {signum})", sigval=signal.Signals(signum))


def _drop_scratch(config: LaunchConfig, log_dir: str, keep: bool = False) -> None:
    """Remove the scratch log folder (never the user's --log-dir), unless a message names a file in it."""
    if not config.log_dir and not keep:
        shutil.rmtree(log_dir, ignore_errors=True)


def _with_exit_code_mode(config: LaunchConfig, error: LaunchError) -> LaunchError:
    """``--exit-codes torchrun``: 1 for every failure, as torchrun (the message is unchanged)."""
    if config.exit_codes == "torchrun":
        error.exit_code = 1
    return error


def _rendezvous_where(config: LaunchConfig, port: int | None) -> str:
    if config.rdzv_backend == "static":
        return f"{config.rendezvous_host or network.LOOPBACK}:{port}"
    return rendezvous_endpoint(config)


def _log_root(log_dir: str | None, run_id: str) -> Path | None:
    """torch's per-run log folder: ``LOG_DIR/<run id>_<random>`` (the newest one)."""
    if not log_dir:
        return None
    runs = sorted(Path(log_dir).glob(f"{run_id}_*"), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def _log_file(log_dir: str | None, run_id: str, local_rank: int) -> Path | None:
    root = _log_root(log_dir, run_id)
    if root is None:
        return None
    attempts = sorted(root.glob("attempt_*"), key=lambda p: int(p.name.split("_")[-1]))
    log = attempts[-1] / str(local_rank) / "stderr.log" if attempts else None
    return log if log is not None and log.exists() else None


def cpu_shares(config: LaunchConfig, threads: int) -> list[tuple[int, ...]] | None:
    """This node's CPUs, one share per CPU worker, for ``pt.Runtime`` to bind each worker's
    compute threads to (see :mod:`paratrain.env.cpu_binding`); None for GPU workers, one
    worker, ``--cpu-binding none``, or workers whose threads do not fit in a share."""
    from paratrain.runtime.device import resolve_backend

    if resolve_backend(config.backend) != "gloo":
        return None  # GPU workers: torchrun's --numa-binding places them by the GPU's NUMA node
    return cpu_binding.node_plan(config.cpu_binding, config.nproc_per_node, threads)


def oversubscription(config: LaunchConfig, env: Mapping[str, str]) -> str | None:
    """A warning when this node's CPU workers want more cores than it has, else None.

    Each CPU worker runs OMP_NUM_THREADS threads; far more threads than cores makes every
    step wait for the scheduler (seen: 64 workers on 2 cores), which no flag of torch warns about.
    """
    from paratrain.runtime.device import resolve_backend

    if resolve_backend(config.backend) != "gloo":
        return None
    cores = len(cpu_binding.usable_cpus())
    threads = int(env.get("OMP_NUM_THREADS", "1") or 1)
    if config.nproc_per_node * threads <= cores:
        return None
    return (f"warning: {config.nproc_per_node} CPU worker(s) × {threads} thread(s) on {cores} core(s) of this node: "
            "they take turns on the cores, so each step waits; fewer workers (--nproc-per-node cpu: one per core) "
            "usually train faster")


def _info(message: str) -> None:
    print(f"paratrain run: {message}", file=sys.stderr, flush=True)
