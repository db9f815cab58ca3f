"""PowerSGD through `paratrain train` on 2 real processes: killed mid-run, resumed, bit-exact."""

from __future__ import annotations

import os
import signal
import subprocess

import torch
from safetensors.torch import load_file

from paratrain.checkpoint.safe_load import load_pt

from tests.support import clean_env, paratrain_cmd

WORDS = ("digits", "--nproc-per-node", "2", "--grad-compression", "powersgd:2", "--max-steps", "24",
         "--save-every", "8", "--no-eval-per-epoch", "--limit-train", "640", "--limit-eval", "64",
         "--no-tensorboard", "--log-every", "5")


def _weights(out) -> dict[str, torch.Tensor]:
    return load_file(str(out / "checkpoints" / "step-000024" / "model.safetensors"))


def _kill_when_pausing(command: list[str], env: dict[str, str]) -> str:
    """Start the run, SIGKILL its whole process group once the save of step 16 pauses."""
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    seen = []
    try:
        for line in run.stdout:
            seen.append(line)
            if "PARATRAIN_TEST_PAUSE_IN_SAVE: pausing" in line:
                break
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=60)
    return "".join(seen)


def test_powersgd_state_is_checkpointed_per_rank_and_a_killed_run_resumes_bit_exact(tmp_path):
    env = clean_env()
    whole = subprocess.run(paratrain_cmd("train", *WORDS, "--out", str(tmp_path / "whole")), env=env,
                           capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stdout + whole.stderr

    killed = tmp_path / "killed"
    command = paratrain_cmd("train", *WORDS, "--out", str(killed))
    before = _kill_when_pausing(command, clean_env(PARATRAIN_TEST_PAUSE_IN_SAVE="120@16"))
    assert "pausing" in before, before
    assert not (killed / "summary.json").exists()
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming from step 8" in resumed.stdout

    # The saved PowerSGD state: every rank's error feedback (they differ), warm-start Qs, iteration.
    saved = load_pt(killed / "checkpoints" / "step-000024" / "strategy.pt")["ranks"]  # its tensors packed (format 3)
    assert len(saved) == 2
    first, second = (rank["powersgd"] for rank in saved)
    assert first["iter"] == second["iter"] == 24 and first["rank"] == 2
    assert first["q"] and set(first["error"]) == set(second["error"])
    assert any(not torch.equal(first["error"][k], second["error"][k]) for k in first["error"])
    assert all(torch.equal(first["q"][k], second["q"][k]) for k in first["q"])  # Q is all-reduced

    expected, got = _weights(tmp_path / "whole"), _weights(killed)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), f"{name} differs after resume"
