"""Shared fixtures: every test must leave the environment and torch.distributed as it found them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# Variables a test may set through monkeypatch but must never leak.
_WATCHED_PREFIXES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "SLURM_", "OMPI_", "PMI", "TORCHELASTIC",
                     "GLOO_", "NCCL_", "PARATRAIN_", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def _watched_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(_WATCHED_PREFIXES)}


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail a test that leaves distributed env vars or an initialised process group behind."""
    import torch.distributed as dist

    before = _watched_env()
    yield
    leaked_group = dist.is_available() and dist.is_initialized()
    if leaked_group:
        dist.destroy_process_group()
    after = _watched_env()
    for key in set(after) - set(before):
        del os.environ[key]
    for key, value in before.items():
        os.environ[key] = value
    assert not leaked_group, "test left a torch.distributed process group initialised"
    assert after == before, f"test leaked environment variables: {sorted(set(after.items()) ^ set(before.items()))}"


@pytest.fixture
def cli_env(tmp_path):
    """Environment for running `python -m paratrain ...` in a subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_WATCHED_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    return env


def paratrain_cmd(*args: str) -> list[str]:
    """argv that runs the real CLI with the current interpreter."""
    return [sys.executable, "-m", "paratrain", *args]
