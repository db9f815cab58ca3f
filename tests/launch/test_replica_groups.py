"""``paratrain run --fault-tolerance replicas``: the Lighthouse killed with SIGKILL mid-run → one line,
every group restarts from its disk checkpoint, and the run ends on the weights of an uninterrupted
one; and the words each group's launcher gets."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from paratrain.launch.replica_groups import group_words
from tests.strategy import ft_workers

GUARD_S = 240  # against a hang, not a time limit


def _lighthouse_pid(supervisor: int) -> int | None:
    for child in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split():
        if "LighthouseServer" in Path(f"/proc/{child}/cmdline").read_text():
            return int(child)
    return None


def test_a_lost_lighthouse_restarts_every_group_from_its_disk_checkpoint(tmp_path):
    pytest.importorskip("torchft")
    job = ft_workers.start_job(tmp_path, 2, FT_STEP_SLEEP="0.3")
    try:
        deadline = time.monotonic() + GUARD_S
        while time.monotonic() < deadline and len(ft_workers.records(tmp_path, 0)) < ft_workers.SAVE_EVERY + 2:
            time.sleep(0.1)
        os.kill(_lighthouse_pid(job.pid), signal.SIGKILL)
        (tmp_path / "harness-done").touch()
        code = job.wait(timeout=GUARD_S)
    finally:
        if job.poll() is None:
            job.kill()
    log = (tmp_path / "job.log").read_text()
    assert code == 0, log[-3000:]
    lines = [line for line in log.splitlines() if "Lighthouse exited" in line]
    assert len(lines) == 1 and "resume from their last disk checkpoint" in lines[0], lines
    result = ft_workers.verify(tmp_path, 2)
    assert all(len(pids) == 2 for pids in result["pids"].values()), result["pids"]  # every group restarted once
    assert all(steps[1] == ft_workers.SAVE_EVERY + 1 for steps in result["first_steps"].values()), result
    assert result["disagreements"] == 0 and result["exactly_once"], result  # replayed steps: the same slices
    assert max(result["max_abs_diff"].values()) <= 1e-6, result["max_abs_diff"]


def test_each_group_gets_runs_words_without_the_fault_tolerance_flags():
    argv = ["paratrain", "run", "--fault-tolerance", "replicas", "--replica-groups=3", "--nproc-per-node", "1",
            "train.py", "--replica-groups", "9"]
    assert group_words(argv) == ["--nproc-per-node", "1", "train.py", "--replica-groups", "9"]
    assert group_words(["paratrain", "run", "--fault-tolerance", "replicas", "-m", "pkg.train", "--lr", "1"]) == [
        "-m", "pkg.train", "--lr", "1"]
