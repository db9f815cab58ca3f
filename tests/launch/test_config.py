"""LaunchConfig: flags → typed config (with SLURM defaults) → validation. No processes."""

from __future__ import annotations

import argparse
import dataclasses
import socket

import pytest
import torch

from paratrain.cli import run_cmd
from paratrain.errors import ConfigError
from paratrain.launch.config import (
    DEFAULT_MASTER_PORT,
    LaunchConfig,
    parse_nnodes,
    parse_nproc,
)
from tests.support import EXAMPLES

ALLREDUCE = str(EXAMPLES / "allreduce.py")
LEGACY = str(EXAMPLES / "legacy_local_rank.py")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="paratrain")
    run_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["run", *argv])


def config(*argv: str, environ: dict[str, str] | None = None) -> LaunchConfig:
    return LaunchConfig.from_args(parse(*argv), environ=environ or {})


def test_one_node_defaults():
    cfg = config(ALLREDUCE, "--epochs", "3", "--nproc-per-node", "7")
    assert cfg.target == ALLREDUCE
    assert cfg.target_args == ("--epochs", "3", "--nproc-per-node", "7")  # after the script: the script's
    assert (cfg.nproc_per_node, cfg.min_nodes, cfg.max_nodes, cfg.node_rank) == (1, 1, 1, 0)
    assert cfg.master_port is None and cfg.loopback_only and not cfg.multi_node
    assert (cfg.rdzv_backend, cfg.backend, cfg.legacy_local_rank, cfg.module) == ("static", "auto", None, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.nproc_per_node = 3  # type: ignore[misc]
    cfg.validate()


def test_sizes_and_nodes_parse():
    assert parse_nnodes("2") == (2, 2) and parse_nnodes("1:4") == (1, 4)
    from torch.distributed.run import determine_local_world_size

    for word in ("auto", "cpu", "3"):  # torchrun's meaning of each word
        assert parse_nproc(word) == determine_local_world_size(word), word
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="--nproc-per-node gpu needs a visible GPU"):
            parse_nproc("gpu")
    cfg = config("--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--nproc_per_node", "3", ALLREDUCE)
    assert (cfg.min_nodes, cfg.max_nodes, cfg.node_rank, cfg.nproc_per_node) == (2, 2, 1, 3)
    assert cfg.master_port == DEFAULT_MASTER_PORT and cfg.multi_node and not cfg.loopback_only
    elastic = config("--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "host9:29400", ALLREDUCE)
    assert (elastic.min_nodes, elastic.max_nodes, elastic.rendezvous_host) == (1, 4, "host9")
    for bad, flag in (("2:3:4", "--nnodes"), ("two", "--nnodes")):
        with pytest.raises(ConfigError, match=flag):
            parse_nnodes(bad)
    with pytest.raises(ConfigError, match="neither a number nor 'auto'"):
        config("--nproc-per-node", "many", ALLREDUCE)
    with pytest.raises(ConfigError, match="--master-port 'http' is not an integer"):
        config("--master-port", "http", ALLREDUCE)
    with pytest.raises(ConfigError, match="--rdzv-last-call applies to a dynamic rendezvous"):
        config("--nnodes", "2", "--master-addr", "h1", "--rdzv-last-call", "5", ALLREDUCE).validate()
    with pytest.raises(ConfigError, match="--rdzv-last-call 0 must be a positive"):
        config("--nnodes", "1:2", "--master-addr", "h1", "--rdzv-last-call", "0", ALLREDUCE).validate()


def test_legacy_local_rank_forms():
    assert config("--legacy-local-rank", LEGACY).legacy_local_rank == "auto"
    bare = config("--legacy-local-rank", LEGACY, "--tag", "x")
    assert (bare.target, bare.target_args) == (LEGACY, ("--tag", "x"))  # the flag did not eat the script
    assert config("--legacy-local-rank=local-rank", LEGACY).legacy_local_rank == "local-rank"
    spaced = config("--legacy-local-rank", "local_rank", LEGACY, "--tag", "x")
    assert (spaced.legacy_local_rank, spaced.target, spaced.target_args) == ("local_rank", LEGACY, ("--tag", "x"))
    module = config("-m", "tests.launch.probe", "--x")
    assert (module.module, module.target, module.target_args) == (True, "tests.launch.probe", ("--x",))
    module.validate()


SLURM_STEP = {
    "SLURM_JOB_ID": "1234",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_NNODES": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
}


def test_slurm_fills_nodes_rank_and_master():
    cfg = config(ALLREDUCE, environ=SLURM_STEP)
    assert (cfg.max_nodes, cfg.node_rank, cfg.master_addr) == (2, 1, "gpu07")
    assert cfg.master_port == config(ALLREDUCE, environ=SLURM_STEP).master_port  # same on every node: from the job id
    assert cfg.master_port != config(ALLREDUCE, environ={**SLURM_STEP, "SLURM_JOB_ID": "1235"}).master_port
    flags = config("--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.5", ALLREDUCE, environ=SLURM_STEP)
    assert (flags.node_rank, flags.master_addr) == (0, "10.0.0.5")  # flags win
    one_node = {
        **SLURM_STEP,
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_NNODES": "1",
        "SLURM_STEP_NUM_NODES": "1",
    }
    assert config(ALLREDUCE, environ=one_node).loopback_only
    with pytest.raises(ConfigError, match="--ntasks-per-node=1"):
        config(ALLREDUCE, environ={**SLURM_STEP, "SLURM_NTASKS": "8"})
    worker = {**SLURM_STEP, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "x"}
    assert not config(ALLREDUCE, environ=worker).multi_node  # a torchrun worker is not an srun launcher


PYTORCHJOB_POD = {  # what Kubeflow's training operator sets in the second of two pods
    "PET_NNODES": "2", "PET_NPROC_PER_NODE": "4", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "job-master-0",
    "PET_MASTER_PORT": "23456", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "1",
}


def test_pet_variables_fill_the_flags_like_torchrun():
    cfg = config(ALLREDUCE, environ=PYTORCHJOB_POD)
    assert (cfg.max_nodes, cfg.nproc_per_node, cfg.node_rank) == (2, 4, 1)
    assert (cfg.master_addr, cfg.master_port) == ("job-master-0", 23456)
    flags = config("--nproc-per-node", "2", "--master-port", "1234", ALLREDUCE, environ=PYTORCHJOB_POD)
    assert (flags.nproc_per_node, flags.master_port, flags.node_rank) == (2, 1234, 1)  # flags win
    elastic = config(ALLREDUCE, environ={"PET_NNODES": "1:3", "PET_RDZV_BACKEND": "c10d",
                                         "PET_RDZV_ENDPOINT": "svc:29400", "PET_RDZV_ID": "job", "PET_MAX_RESTARTS": "3"})
    assert (elastic.min_nodes, elastic.max_nodes, elastic.rdzv_backend, elastic.rdzv_endpoint) == (1, 3, "c10d", "svc:29400")
    assert (elastic.rdzv_id, elastic.max_restarts) == ("job", 3)
    assert config("allreduce", environ={"PET_MODULE": "1"}).module
    with pytest.raises(ConfigError, match="--nproc-per-node 'x'"):
        config(ALLREDUCE, environ={"PET_NPROC_PER_NODE": "x"})


def test_slurm_step_with_fewer_cpus_than_workers_is_refused():
    step = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_NNODES": "1", "SLURM_STEP_ID": "0",
            "SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n1", "SLURM_CPUS_ON_NODE": "1"}
    with pytest.raises(ConfigError, match=r"1 CPU\(s\) on this node but --nproc-per-node 2 .*srun --cpus-per-task 2"):
        config("--nproc-per-node", "2", ALLREDUCE, environ=step).validate()
    config("--nproc-per-node", "2", ALLREDUCE, environ={**step, "SLURM_CPUS_ON_NODE": "2"}).validate()
    config("--nproc-per-node", "2", "--threads-per-proc", "1", ALLREDUCE, environ=step).validate()  # asked for it


def test_a_slurm_step_with_several_tasks_per_node_runs_when_the_flags_say_what_this_node_is():
    config("--nnodes", "1", ALLREDUCE, environ={**SLURM_STEP, "SLURM_NTASKS": "1"})
    with pytest.raises(ConfigError, match="or give --nnodes and --node-rank yourself"):
        config(ALLREDUCE, environ={**SLURM_STEP, "SLURM_NTASKS": "1"})


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "no script given"),
        (["missing.py"], "script 'missing.py' not found"),
        (["-m", "no_such_module_here"], "module 'no_such_module_here' is not importable"),
        (["--nproc-per-node", "0", ALLREDUCE], "--nproc-per-node 0 must be at least 1"),
        (["--nproc-per-node", "-1", ALLREDUCE], "--nproc-per-node -1 must be at least 1"),
        (["--nnodes", "3:2", ALLREDUCE], "1 <= MIN <= MAX"),
        (
            ["--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1", ALLREDUCE],
            "--node-rank 2 is outside --nnodes 2",
        ),
        (["--nnodes", "2", ALLREDUCE], "needs --master-addr"),
        (["--nnodes", "2", "--master-addr", "no-such-host.invalid", ALLREDUCE], "does not resolve"),
        (["--master-port", "70000", ALLREDUCE], "not a TCP port"),
        (["--nnodes", "2", "--master-addr", "[::1]:29500", ALLREDUCE],
         r"'\[::1\]:29500' is not an address: give the address alone and the port apart: --master-addr ::1 "
         "--master-port 29500"),
        (["--nnodes", "2", "--master-addr", "10.0.0.1:29500", ALLREDUCE],
         "holds a port; write --master-addr 10.0.0.1 --master-port 29500"),
        (["--nnodes", "2", "--master-addr", "fd00::1:29500", ALLREDUCE],
         r"write an IPv6 address alone \(--master-addr fd00::1 or --master-addr \[fd00::1\]\)"),
        (["--nnodes", "2", "--rdzv-endpoint", "::1:29500", ALLREDUCE],
         r"an IPv6 address goes in brackets before the port; write --rdzv-endpoint \[fd00::1\]:29500"),
        (["--max-restarts", "-1", ALLREDUCE], "--max-restarts -1"),
        (["--rdzv-timeout", "0", ALLREDUCE], "--rdzv-timeout 0"),
        (["--rdzv-backend", "zookeeper", ALLREDUCE], "--rdzv-backend 'zookeeper'"),
        (["--threads-per-proc", "0", ALLREDUCE], "--threads-per-proc 0"),
        (["--stall-timeout", "-1", ALLREDUCE], "--stall-timeout -1 must be a finite number of seconds, or 0 to turn the watchdog off"),
        (["--stall-timeout", "nan", ALLREDUCE], "--stall-timeout nan must be"),
        (["--backend", "mpi", ALLREDUCE], "backend 'mpi' is not one of"),
        (["--warm-workers", "--no-python", "true"], "--warm-workers forks Python workers .* --no-python"),
        (["--warm-workers", "--numa-binding", "node", ALLREDUCE], "--warm-workers forks the workers from one pool"),
    ],
)
def test_validate_refuses_with_one_line(argv, message):
    with pytest.raises(ConfigError, match=message) as caught:
        config(*argv).validate()
    assert "\n" not in str(caught.value)


def test_an_ipv6_node_0_is_taken_with_or_without_brackets():
    for argv in (["--master-addr", "[fd00::1]"], ["--master-addr", "fd00::1"], ["--rdzv-endpoint", "[fd00::1]:29400"]):
        given = config("--nnodes", "2", "--node-rank", "1", *argv, ALLREDUCE)
        assert given.master_addr == "fd00::1", (argv, given.master_addr)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is visible: nccl is allowed here")
def test_nccl_without_cuda_is_refused():
    with pytest.raises(ConfigError, match="nccl needs CUDA"):
        config("--backend", "nccl", ALLREDUCE).validate()


def test_busy_master_port_is_refused_on_node_zero_only():
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        with pytest.raises(ConfigError, match=f"--master-port {port} is already in use.*leave --master-port out"):
            config("--master-port", port, ALLREDUCE).validate()
        with pytest.raises(ConfigError, match=f"--master-port {port} is already in use"):
            config("--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port, ALLREDUCE).validate()
        # Node 1 does not host the store: the port is node 0's business.
        config(
            "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--master-port", port, ALLREDUCE
        ).validate()


def test_a_module_in_the_working_directory_is_found_as_python_m_would(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    config("-m", "pkg.mod").validate()
    with pytest.raises(ConfigError, match=f"module 'pkg.nope' is not importable from {tmp_path}"):
        config("-m", "pkg.nope").validate()
    monkeypatch.chdir(tmp_path / "pkg")
    with pytest.raises(ConfigError, match="run from the directory that contains its top-level package"):
        config("-m", "pkg.mod2").validate()


def test_more_cpu_workers_than_cores_is_a_warning_naming_the_fix():
    import os

    from paratrain.launch.torchrun import oversubscription

    cores = len(os.sched_getaffinity(0))
    many = oversubscription(config("--nproc-per-node", str(cores * 32), ALLREDUCE), {"OMP_NUM_THREADS": "1"})
    assert many.startswith(f"warning: {cores * 32} CPU worker(s) × 1 thread(s) on {cores} core(s)")
    assert "--nproc-per-node cpu: one per core" in many
    assert oversubscription(config("--nproc-per-node", "1", ALLREDUCE), {"OMP_NUM_THREADS": "1"}) is None
    assert oversubscription(config("--nproc-per-node", "1", ALLREDUCE), {"OMP_NUM_THREADS": str(cores * 4)}) is not None
