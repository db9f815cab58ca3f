"""Helpers for tests that start real processes through the real CLI."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

WATCHED_PREFIXES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "SLURM_", "OMPI_", "PMI", "TORCHELASTIC",
                    "GLOO_", "NCCL_", "PARATRAIN_", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without launcher variables, with src/ importable and unbuffered output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(WATCHED_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def paratrain_cmd(*args: str) -> list[str]:
    """argv that runs the real CLI with the current interpreter."""
    return [sys.executable, "-m", "paratrain", *args]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a launcher's --master-port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
