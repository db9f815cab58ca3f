"""A real SLURM cluster (one node, started by the fixture): srun, sbatch, scancel.

Each job trains the converted two-machine MNIST script or the built-in digits task on 2 CPU
processes; SLURM's own variables are all the processes get.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from tests.support import EXAMPLES, ROOT, clean_env, paratrain_cmd

SCRIPT = str(EXAMPLES / "migrate" / "two_machines.py")
SBATCH = str(EXAMPLES / "slurm" / "train_digits.sbatch")
HANG_GUARD_S = 300  # a guard against a hang, not a performance limit


def _run(cluster, argv: list[str], **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ROOT, env=cluster.env(clean_env(**extra)), capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def test_srun_one_task_starts_paratrain_run_with_two_workers(slurm_cluster, tmp_path):
    done = _run(slurm_cluster, ["srun", "-N1", "-n1", "-c2", *paratrain_cmd(
        "run", "--nproc-per-node", "2", SCRIPT, "--epochs", "1", "--out", str(tmp_path))])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 processes started by torchrun, backend gloo" in done.stdout
    assert "epoch 1/1:" in done.stdout and (tmp_path / "checkpoints" / "latest").exists()


def test_srun_two_tasks_join_one_group_from_slurm_variables(slurm_cluster, tmp_path):
    # No torchrun: rank, world size, master address (the node list's first host) and a
    # port derived from the job id come from SLURM.
    done = _run(slurm_cluster, ["srun", "-N1", "-n2", sys.executable, SCRIPT, "--epochs", "1", "--out", str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 processes started by slurm, backend gloo" in done.stdout
    assert done.stdout.count("epoch 1/1:") == 1  # printed by rank 0 only
    assert (tmp_path / "checkpoints" / "latest").exists()


def test_allocation_smaller_than_nproc_per_node_is_refused(slurm_cluster, tmp_path):
    done = _run(slurm_cluster, ["srun", "-N1", "-n1", "-c1", *paratrain_cmd(
        "run", "--nproc-per-node", "2", SCRIPT, "--out", str(tmp_path))])
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("paratrain run: error:")]
    assert len(errors) == 1, done.stderr
    assert "this SLURM step has 1 CPU(s) on this node but --nproc-per-node 2" in errors[0]
    assert "srun --cpus-per-task 2" in errors[0]
    assert not (tmp_path / "checkpoints").exists()


def _submit(cluster, out_dir, **variables: str) -> str:
    done = _run(cluster, ["sbatch", "--parsable", "-o", str(out_dir.parent / "job-%j.out"), SBATCH],
                OUT=str(out_dir), **variables)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _job_state(cluster, job: str) -> str:
    shown = _run(cluster, ["scontrol", "show", "job", job]).stdout
    match = re.search(r"JobState=(\w+)", shown)
    return match.group(1) if match else "GONE"


def _wait_for(cluster, job: str, until, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not until():
        state = _job_state(cluster, job)
        assert time.monotonic() < deadline, f"job {job} ({state}) never reached: {what}"
        time.sleep(0.25)


def _finished(cluster, job: str) -> str:
    done_states = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "GONE")
    _wait_for(cluster, job, lambda: _job_state(cluster, job) in done_states, "the end")
    return _job_state(cluster, job)


def _checkpoints(out_dir) -> list[str]:
    folder = out_dir / "checkpoints"
    return sorted(p.name for p in folder.glob("step-*")) if folder.exists() else []


def test_sbatch_job_scancelled_mid_run_resumes_in_the_next_job(slurm_cluster, tmp_path):
    out = tmp_path / "run"
    # 1. The example job script trains the built-in task and checkpoints every 5 steps;
    #    scancel (SIGTERM to the step, SIGKILL after KillWait) stops it mid-run.
    job = _submit(slurm_cluster, out, EPOCHS="500", SAVE_EVERY="5")
    _wait_for(slurm_cluster, job, lambda: any(name >= "step-000010" for name in _checkpoints(out)),
              "its second checkpoint")
    cancel = _run(slurm_cluster, ["scancel", job])
    assert cancel.returncode == 0, cancel.stderr
    assert _finished(slurm_cluster, job) in ("CANCELLED", "GONE")
    log = (tmp_path / f"job-{job}.out").read_text()
    assert "starting from step 0" in log, log[-3000:]
    stopped_at = int(max(_checkpoints(out)).split("-")[1])

    # 2. What scancel left is a complete checkpoint: the next submission resumes from it
    #    and trains to the end (45 steps per epoch on 2 processes).
    epochs = stopped_at // 45 + 1
    job = _submit(slurm_cluster, out, EPOCHS=str(epochs))
    state = _finished(slurm_cluster, job)
    log = (tmp_path / f"job-{job}.out").read_text()
    assert state == "COMPLETED", log[-3000:]
    assert f"resuming from step {stopped_at}" in log, log[-3000:]
    assert f"done: {45 * epochs} steps ({epochs:.2f} epochs) on 2 process(es)" in log, log[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from_step"] == stopped_at, summary
    assert f"step-{45 * epochs:06d}" in _checkpoints(out)
