"""An error that a restart would repeat ends the job at once instead of spending --max-restarts.

Two nodes on one machine (two launchers over 127.0.0.1); node 1 runs in a mount namespace of
its own with an empty disk over the run directory, as a PC whose checkpoints are on its own disk.
Before: each of the three restarts failed with "... is not visible on this node", and nothing
said so before the first resume.
"""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest

from paratrain.env.no_restart import END_SIGNAL, end_job_instead_of_restart, restarts_left
from paratrain.errors import CheckpointError, ConfigError, SharedStorageError
from tests.launch.processes import finish, start
from tests.support import ROOT, clean_env, free_port, paratrain_cmd

FIT = str(ROOT / "tests" / "diagnostics" / "fit_script.py")


def _own_disk(path, argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace where ``path`` is an empty tmpfs (a disk of its own)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"',
            str(path), *argv]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="mount namespaces need root")
def test_checkpoints_a_node_cannot_see_are_named_at_the_first_save_and_end_the_job_without_restarts(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    port = str(free_port())

    def node(rank: int) -> list[str]:
        return paratrain_cmd("run", "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank),
                             "--master-addr", "127.0.0.1", "--master-port", port, "--rdzv-timeout", "60",
                             "--max-restarts", "3", FIT, str(out), "--steps", "30", "--crash-rank", "1", "--crash-step", "8")

    node0, node1 = finish([start(node(0), clean_env()), start(_own_disk(out, node(1)), clean_env())])
    # At the first save (step 6), before anything needs it:
    assert "is not visible to rank(s) 1" in node0.stderr and "every node shares" in node0.stderr, node0.stderr[-3000:]
    # Rank 1 crashed at step 8; the restart's resume cannot read step 6 on node 1: the end, on both nodes.
    for result in (node0, node1):
        assert result.returncode == 1, result.stderr[-3000:]
        last = result.stderr_lines[-1]
        assert "not visible on this node" in last and "not restarted: a restart would fail the same way" in last, last
    attempts = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"attempt"' in line]
    assert len(attempts) == 2  # the first run and one restart, not 1 + 3


def test_only_an_error_a_restart_repeats_asks_the_launcher(monkeypatch):
    asked = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: asked.append((pid, sig)))
    under_run = {"PARATRAIN_LAUNCHER_PID": "4242", "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_MAX_RESTARTS": "3"}
    assert restarts_left(under_run) and not restarts_left({**under_run, "TORCHELASTIC_RESTART_COUNT": "3"})
    assert not end_job_instead_of_restart(CheckpointError("disk full"), under_run)  # a restart may help
    assert not end_job_instead_of_restart(RuntimeError("user code"), under_run)
    assert not end_job_instead_of_restart(ConfigError("bad"), {**under_run, "TORCHELASTIC_MAX_RESTARTS": "0"})
    assert not end_job_instead_of_restart(ConfigError("bad"), {k: v for k, v in under_run.items() if "PID" not in k})
    assert asked == []
    assert end_job_instead_of_restart(SharedStorageError("not visible"), under_run)
    assert asked == [(4242, END_SIGNAL)] and END_SIGNAL == signal.SIGUSR1
