"""Real OpenMPI: ``mpirun -np 2 python script.py`` joins one process group through pt.Runtime()."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.env.slurm_cluster import ensure_installed
from tests.support import EXAMPLES, ROOT, clean_env

SCRIPT = str(EXAMPLES / "migrate" / "two_machines.py")
HANG_GUARD_S = 300  # a guard against a hang, not a performance limit


@pytest.fixture(scope="module")
def mpirun() -> list[str]:
    why_not = ensure_installed(("mpirun",))
    if why_not:
        pytest.skip(f"MPI tests need OpenMPI: {why_not}")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [shutil.which("mpirun"), *root, "--oversubscribe", "--bind-to", "none"]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_mpirun_two_processes_train_and_checkpoint(mpirun, tmp_path):
    # Nothing but mpirun's own variables: one node, so the master is 127.0.0.1 and the
    # port comes from the MPI job id.
    done = _run([*mpirun, "-np", "2", sys.executable, SCRIPT, "--epochs", "1", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 processes started by mpi, backend gloo" in done.stdout
    assert done.stdout.count("epoch 1/1:") == 1
    assert (tmp_path / "checkpoints" / "epoch-0000").is_dir()


def test_mpirun_with_an_unreachable_master_names_it(mpirun, tmp_path):
    # ".invalid" never resolves (RFC 6761): every rank fails after --timeout, naming the address.
    done = _run([*mpirun, "-np", "2", "-x", "MASTER_ADDR=master.invalid", "-x", "MASTER_PORT=29999",
                 sys.executable, SCRIPT, "--timeout", "5", "--out", str(tmp_path)])
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("paratrain.errors.DistributedError")]
    assert errors, done.stderr[-3000:]
    for line in errors:  # each rank from its own side: rank 0 hosts the rendezvous, the others wait for it
        assert "could not join the process group at master.invalid:29999 after waiting" in line
        assert ("rank 0 hosts the rendezvous there: check that master.invalid is an address of this machine" in line
                if "rank 0 could not" in line else "check that rank 0 runs there" in line), line
