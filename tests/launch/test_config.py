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
    assert parse_nproc("auto") == (torch.cuda.device_count() if torch.cuda.is_available() else 1)
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
        (["--max-restarts", "-1", ALLREDUCE], "--max-restarts -1"),
        (["--rdzv-timeout", "0", ALLREDUCE], "--rdzv-timeout 0"),
        (["--rdzv-backend", "zookeeper", ALLREDUCE], "--rdzv-backend 'zookeeper'"),
        (["--threads-per-proc", "0", ALLREDUCE], "--threads-per-proc 0"),
        (["--backend", "mpi", ALLREDUCE], "backend 'mpi' is not one of"),
    ],
)
def test_validate_refuses_with_one_line(argv, message):
    with pytest.raises(ConfigError, match=message) as caught:
        config(*argv).validate()
    assert "\n" not in str(caught.value)


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
