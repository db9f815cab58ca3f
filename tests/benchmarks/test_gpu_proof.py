"""The GPU proof cannot rot on machines without a GPU: its smoke mode runs every part on the CPU.

The rows are spelled out here, not read from the script, so a row the script stops writing fails
the test. ``benchmarks/gpu_proof.sh OUTDIR`` on a GPU machine runs the same code at full size.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from tests.support import ROOT, clean_env

PART_A = ["versions", "digits cpu", "digits fp32", "digits bf16-mixed", "digits fp16-mixed", "digits compile",
          "digits ddp-nccl", "kill -9 and rerun", "own loop", "readme script", "doctor", "doctor gpu self-test",
          "pytest -m gpu"]
METHODS = ["paratrain", "paratrain-compile", "paratrain-fit", "hf-trainer", "accelerate", "fabric", "raw-compiled"]
PART_B = [f"bert batch {batch} {method}" for batch in (32, 256) for method in METHODS]
# What the smoke run must show on a CPU: the CUDA-only rows are present and say so; the others ran.
SMOKE_STATUS = {
    "versions": {"ok"}, "digits cpu": {"ok"}, "digits fp32": {"ok"}, "kill -9 and rerun": {"ok"}, "own loop": {"ok"},
    "readme script": {"ok"}, "doctor": {"ok"},
    **{name: {"skipped: no CUDA"} for name in ["digits bf16-mixed", "digits fp16-mixed", "digits compile",
                                               "digits ddp-nccl", "doctor gpu self-test", "pytest -m gpu"]},
    **{f"bert batch {b} {m}": {"ok"} for b in (32, 256) for m in ("paratrain", "paratrain-fit", "raw-compiled")},
    **{f"bert batch {b} paratrain-compile": {"skipped: no CUDA"} for b in (32, 256)},
    **{f"bert batch {b} {m}": {"ok", "skipped: not installed"} for b in (32, 256)
       for m in ("hf-trainer", "accelerate", "fabric")},
}


def proof(out, *flags):
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_proof.sh"), str(out), *flags], env=clean_env(),
                          capture_output=True, text=True, timeout=300)
    result = json.loads((out / "proof.json").read_text()) if (out / "proof.json").exists() else None
    return done, result, (out / "proof.md").read_text() if (out / "proof.md").exists() else ""


def assert_every_row(result, markdown):
    assert [c["name"] for c in result["checks"]] == PART_A + PART_B
    for name in PART_A:
        assert f"| {name} |" in markdown, name
    for name in PART_B:
        batch, method = name.split()[2:]
        assert f"| {batch} | {method} |" in markdown, name
    assert len(result["goals"]) == 10
    for goal in result["goals"]:
        assert f"| {goal['goal']} |" in markdown, goal


def test_the_smoke_run_executes_every_part_and_writes_every_row(tmp_path):
    done, result, markdown = proof(tmp_path, "--device", "cpu", "--smoke")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proof.json", "proof.log", "proof.md"]
    assert_every_row(result, markdown)
    status = {c["name"]: c["status"] for c in result["checks"]}
    wrong = {name: status[name] for name, allowed in SMOKE_STATUS.items() if status[name] not in allowed}
    assert not wrong, json.dumps(result["checks"], indent=1)[-4000:]
    figures = {c["name"]: c["figures"] for c in result["checks"]}
    assert figures["kill -9 and rerun"]["identical"] is True
    assert figures["kill -9 and rerun"]["resumed_from_step"] > 0  # the rerun resumed, it did not start over
    assert figures["digits fp32"]["accuracy"] > 0.9
    assert figures["own loop"]["ddp_wrapped"] and figures["own loop"]["last_loss"] < figures["own loop"]["first_loss"]
    assert figures["readme script"]["epochs"] == ["0", "1", "2"] and figures["readme script"]["rerun_trained"] is False
    assert all(figures[f"bert batch {b} paratrain"]["samples_per_s"] > 0 for b in (32, 256))
    assert "$ " in (tmp_path / "proof.log").read_text()  # the commands are logged with their output


@pytest.mark.parametrize("flags, code, first, rest", [
    (["--device", "cpu", "--smoke", "--time-limit", "0.5"], 0, "not run: out of time", "not run: out of time"),
    (["--device", "cuda"], 1, "failed", "skipped: no CUDA"),  # versions fails, nothing else can run
], ids=["out-of-time", "no-cuda"])
def test_rows_that_did_not_run_are_still_written_and_a_failure_sets_the_exit_code(tmp_path, flags, code, first, rest):
    if "cuda" in flags and torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the full proof would run")
    done, result, markdown = proof(tmp_path, *flags)
    assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
    assert_every_row(result, markdown)
    assert result["checks"][0]["status"] == first
    assert {c["status"] for c in result["checks"][1:]} == {rest}
