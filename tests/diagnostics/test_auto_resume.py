"""Elastic auto-resume: workers SIGKILLed at three random moments, and the run ends as if nothing happened.

torch elastic's agent restarts the group (--max-restarts); the fit loop and Checkpointer
resume from the newest complete checkpoint at the exact sampler position, so the final
weights equal an uninterrupted run's bit for bit (CPU, fp32).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import torch
from safetensors.torch import load_file

from paratrain.checkpoint.catalog import complete
from paratrain.checkpoint.export import read_model_state
from tests.diagnostics.killing import kill_at_random_moments, newest_checkpoint_step
from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, paratrain_cmd

STEPS = 12
DIGITS = ["--nproc-per-node", "2", "--limit-train", "192", "--limit-eval", "64", "--max-steps", str(STEPS),
          "--save-every", "1", "--keep-last", "2", "--no-eval-per-epoch", "--no-tensorboard", "--log-every", "100"]
SCRIPT = str(ROOT / "tests" / "diagnostics" / "checkpointer_script.py")


def _start(argv, env):
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _final_digits_weights(out: Path) -> dict[str, torch.Tensor]:
    newest, _ = complete(out / "checkpoints")[-1]
    return read_model_state(newest)[0]


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _interrupted(argv, env, progress, rng) -> tuple[subprocess.CompletedProcess, list]:
    launcher = _start(argv, env)
    try:
        kills = kill_at_random_moments(launcher, progress, STEPS, moments=3, rng=rng)
        output, _ = launcher.communicate(timeout=HANG_GUARD_S)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    return subprocess.CompletedProcess(argv, launcher.returncode, output), kills


def test_killed_three_times_train_and_an_own_checkpointer_loop_finish_bit_identical(tmp_path, cli_env):
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    # Both uninterrupted references at once (they are independent), then the killed runs.
    references = [
        _start(paratrain_cmd("train", "digits", *DIGITS, "--out", str(tmp_path / "digits-ref")), cli_env),
        _start(paratrain_cmd("run", "--nproc-per-node", "2", SCRIPT, str(tmp_path / "own-ref"), str(STEPS)), cli_env),
    ]
    for reference in references:
        output, _ = reference.communicate(timeout=HANG_GUARD_S)
        assert reference.returncode == 0, output

    digits_out = tmp_path / "digits"
    run, kills = _interrupted(
        paratrain_cmd("train", "digits", *DIGITS, "--max-restarts", "3", "--out", str(digits_out)), cli_env,
        lambda: newest_checkpoint_step(digits_out / "checkpoints"), rng)
    context = f"seed {seed}, kills (step, pid) {kills}:\n{run.stdout[-3000:]}"
    assert run.returncode == 0, context
    resumes = [json.loads(line) for line in (digits_out / "metrics.jsonl").read_text().splitlines()
               if '"resume"' in line]
    # Every restart that got as far as loading continued from a checkpoint, none from step 0 (a kill may
    # also land while a restarted attempt is still starting, before it logs its resume).
    assert 1 <= len(resumes) <= 3 and run.stdout.count("starting from step 0") == 1, context
    assert _same(_final_digits_weights(digits_out), _final_digits_weights(tmp_path / "digits-ref")), context

    own_out = tmp_path / "own"
    run, kills = _interrupted(
        paratrain_cmd("run", "--nproc-per-node", "2", "--max-restarts", "3", SCRIPT, str(own_out), str(STEPS)),
        cli_env, lambda: newest_checkpoint_step(own_out / "checkpoints"), rng)
    context = f"seed {seed}, kills (step, pid) {kills}:\n{run.stdout[-3000:]}"
    assert run.returncode == 0, context
    assert _same(load_file(own_out / "final.safetensors"), load_file(tmp_path / "own-ref" / "final.safetensors")), context
