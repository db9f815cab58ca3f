"""Config → torchrun argv and worker environment. torch's own parser reads our argv back."""

from __future__ import annotations

from torch.distributed import run as torchrun

from paratrain.launch.config import LaunchConfig
from paratrain.launch.network import LOOPBACK, Interface
from paratrain.launch.torchrun import (
    rendezvous_endpoint,
    threads_per_proc,
    torchrun_argv,
    worker_env,
)
from tests.launch.test_config import ALLREDUCE, LEGACY, config

LO = Interface("lo", LOOPBACK)


def test_one_node_argv_uses_the_loopback_store_port():
    cfg = config("--nproc-per-node", "2", ALLREDUCE, "--lr", "0.1")
    argv = torchrun_argv(cfg, master_port=41234, run_id="job-1")
    args = torchrun.parse_args(argv)
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend, args.rdzv_id) == ("1:1", "2", "static", "job-1")
    assert (args.master_addr, args.master_port, args.node_rank, args.rdzv_conf) == (LOOPBACK, 41234, 0, "timeout=600")
    assert (args.training_script, args.training_script_args) == (ALLREDUCE, ["--lr", "0.1"])
    assert not args.module and args.log_dir is None


def test_multi_node_static_argv():
    cfg = config(
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "10.1.2.3",
        "--master-port",
        "29600",
        "--max-restarts",
        "2",
        "--rdzv-timeout",
        "30",
        ALLREDUCE,
    )
    args = torchrun.parse_args(torchrun_argv(cfg, master_port=cfg.master_port, run_id="paratrain"))
    assert (args.nnodes, args.node_rank, args.master_addr, args.master_port) == ("2:2", 1, "10.1.2.3", 29600)
    assert (args.max_restarts, args.rdzv_conf) == (2, "timeout=30")


def test_c10d_argv_uses_join_timeout_and_the_endpoint():
    cfg = config(
        "--nnodes",
        "1:3",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "h1:29400",
        "--rdzv-id",
        "exp",
        "--rdzv-timeout",
        "45",
        ALLREDUCE,
    )
    args = torchrun.parse_args(torchrun_argv(cfg, master_port=None, run_id="exp"))
    assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_conf, args.nnodes) == (
        "c10d",
        "h1:29400",
        "join_timeout=45",
        "1:3",
    )
    assert rendezvous_endpoint(config("--rdzv-backend", "c10d", "--master-addr", "h2", ALLREDUCE)) == "h2:29400"
    last_call = config("--nnodes", "1:2", "--rdzv-endpoint", "h1:29400", "--rdzv-last-call", "5", ALLREDUCE)
    assert torchrun.parse_args(torchrun_argv(last_call, None, "r")).rdzv_conf == "join_timeout=600,last_call_timeout=5"
    assert rendezvous_endpoint(config("--rdzv-backend", "c10d", ALLREDUCE)) == f"{LOOPBACK}:0"


def test_log_dir_module_and_legacy_local_rank():
    cfg = config("--log-dir", "/tmp/logs", "--legacy-local-rank", "-m", "tests.launch.probe", "--x", "1")
    args = torchrun.parse_args(torchrun_argv(cfg, master_port=1, run_id="r"))
    assert (args.log_dir, args.redirects, args.tee, args.module) == ("/tmp/logs", "3", "3", True)
    # The macro that torch elastic replaces per worker, before the script's own arguments.
    assert args.training_script_args == ["--local-rank=${local_rank}", "--x", "1"]
    legacy = torchrun.parse_args(torchrun_argv(config("--legacy-local-rank", LEGACY, "--tag", "t"), 1, "r"))
    assert legacy.training_script_args == ["--local_rank=${local_rank}", "--tag", "t"]


def test_worker_env_sets_threads_backend_and_interfaces_unless_the_user_did():
    cfg = config("--nproc-per-node", "2", "--backend", "gloo", ALLREDUCE)
    env = worker_env(cfg, {}, LO)
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "lo"
    assert env["PARATRAIN_BACKEND"] == "gloo" and int(env["OMP_NUM_THREADS"]) >= 1
    mine = worker_env(cfg, {"GLOO_SOCKET_IFNAME": "eth9", "PARATRAIN_BACKEND": "nccl"}, LO)
    assert "GLOO_SOCKET_IFNAME" not in mine and mine["NCCL_SOCKET_IFNAME"] == "lo"
    assert mine["PARATRAIN_BACKEND"] == "gloo"  # the flag wins over the variable
    assert "PARATRAIN_BACKEND" not in worker_env(config(ALLREDUCE), {"PARATRAIN_BACKEND": "gloo"}, LO)
    assert worker_env(config(ALLREDUCE), {}, LO)["PARATRAIN_BACKEND"] == "auto"


def test_the_stall_timeout_reaches_the_workers_and_zero_turns_the_watchdog_off():
    assert "PARATRAIN_STALL_TIMEOUT" not in worker_env(config(ALLREDUCE), {}, LO)  # the workers' default: 300
    assert worker_env(config("--stall-timeout", "90", ALLREDUCE), {}, LO)["PARATRAIN_STALL_TIMEOUT"] == "90"
    off = config("--stall-timeout", "0", ALLREDUCE)
    off.validate()
    assert worker_env(off, {}, LO)["PARATRAIN_STALL_TIMEOUT"] == "0"


def test_threads_per_proc():
    assert threads_per_proc(config("--threads-per-proc", "3", ALLREDUCE), {"OMP_NUM_THREADS": "8"}) == 3
    assert threads_per_proc(config(ALLREDUCE), {"OMP_NUM_THREADS": "5"}) == 5
    import os

    cores = len(os.sched_getaffinity(0))
    assert threads_per_proc(config("--nproc-per-node", "1", ALLREDUCE), {}) == cores
    assert threads_per_proc(config("--nproc-per-node", str(cores * 4), ALLREDUCE), {}) == 1  # at least 1


def test_launch_config_is_usable_without_the_cli():
    cfg = LaunchConfig(target=ALLREDUCE, nproc_per_node=2)
    cfg.validate()
    assert torchrun.parse_args(torchrun_argv(cfg, 5, "r")).nproc_per_node == "2"


def test_cpu_shares_go_to_cpu_workers_only_and_the_users_variable_wins(monkeypatch):
    import os

    from paratrain.runtime import device

    cpus = len(os.sched_getaffinity(0))
    two = config("--nproc-per-node", "2", "--threads-per-proc", "1", ALLREDUCE)
    env = worker_env(two, {}, LO)
    assert ("PARATRAIN_CPU_CORES" in env) == (cpus >= 2)
    assert "PARATRAIN_CPU_CORES" not in worker_env(two, {"PARATRAIN_CPU_CORES": "0;0"}, LO)  # yours is kept
    off = config("--nproc-per-node", "2", "--threads-per-proc", "1", "--cpu-binding", "none", ALLREDUCE)
    assert "PARATRAIN_CPU_CORES" not in worker_env(off, {}, LO)
    crowded = config("--nproc-per-node", "2", "--threads-per-proc", str(cpus), ALLREDUCE)
    assert "PARATRAIN_CPU_CORES" not in worker_env(crowded, {}, LO)  # 2 × all CPUs: nothing to share out
    # GPU workers (NCCL): no CPU shares, whatever the CPUs; torchrun's --numa-binding is theirs.
    monkeypatch.setattr(device, "resolve_backend", lambda backend: "nccl")
    assert "PARATRAIN_CPU_CORES" not in worker_env(two, {}, LO)
