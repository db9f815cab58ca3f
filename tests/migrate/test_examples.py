"""Each migration guide's converted script (examples/migrate/) trains on 2 real processes.

Launched as the guides say: `paratrain run --nproc-per-node 2 SCRIPT`, or plain `python` for
the mp.spawn conversion, which starts its own workers with pt.spawn.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from tests.support import EXAMPLES, ROOT, clean_env, paratrain_cmd

MIGRATE = EXAMPLES / "migrate"
HANG_GUARD_S = 300  # a guard against a hang, not a performance limit


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _launch(script: str, *args: str) -> str:
    return _run(paratrain_cmd("run", "--nproc-per-node", "2", str(MIGRATE / script), *args)).stdout


def _numbers(pattern: str, text: str) -> list[float]:
    return [float(x) for x in re.findall(pattern, text)]


def test_seed_001_apex_launch(tmp_path):
    out = _launch("apex_launch.py", "--out", str(tmp_path))
    ious = _numbers(r"iou : ([\d.]+)", out)
    assert len(ious) == 2 and ious[-1] > 0.5, out  # printed once per epoch (rank 0), SyncBN + bf16 trained
    assert (tmp_path / "checkpoints" / "epoch-0001").is_dir()


def test_seed_002_dataparallel(tmp_path):
    out = _launch("dataparallel.py", "--out", str(tmp_path))
    accuracies = _numbers(r"dev accuracy ([\d.]+)", out)
    assert len(accuracies) == 3 and accuracies[-1] > 0.8, out
    assert '"world_size": 2' in (tmp_path / "result.json").read_text()


def test_seed_003_mp_spawn():
    done = _run([sys.executable, str(MIGRATE / "mp_spawn.py"), "--epochs", "2"])
    result = ast.literal_eval(done.stdout.strip().splitlines()[-1])  # rank 0's return value
    assert result["world_size"] == 2 and result["dev_samples"] == 300  # every dev review once
    assert result["accuracy"] > 0.5
    assert "macro avg" in done.stdout


def test_seed_003_horovod():
    out = _launch("horovod.py")
    assert out.count("【train】") == 2 and re.search(r"【dev】 accuracy:0\.[5-9]\d+ on 300 reviews", out), out


def test_seed_003_deepspeed(tmp_path):
    pytest.importorskip("deepspeed", reason="the DeepSpeed conversion needs the deepspeed extra")
    out = _launch("deepspeed_zero.py", "--out", str(tmp_path))
    assert _numbers(r"ZeRO-2 dev accuracy ([\d.]+) on 300", out)[-1] > 0.5, out
    export = _run(paratrain_cmd("ckpt", "export", str(tmp_path / "checkpoints"), "-o", str(tmp_path / "model.safetensors")))
    assert (tmp_path / "model.safetensors").stat().st_size > 0, export.stdout  # no zero_to_fp32.py


def test_seed_003_accelerate():
    out = _launch("accelerate_loop.py")
    assert _numbers(r"dev accuracy ([\d.]+) on 300 reviews", out)[-1] > 0.5, out


def test_seed_003_hf_trainer(tmp_path):
    out = _launch("hf_trainer.py", "--out", str(tmp_path))
    lines = [line for line in out.splitlines() if line.endswith("after 38 steps on 2 processes")]
    assert len(lines) == 1, out  # 2 epochs of 19 steps, printed by rank 0 only
    assert float(lines[0].split()[3]) > 0.5


def test_seed_004_two_machines(tmp_path):
    out = _launch("two_machines.py", "--out", str(tmp_path), "--epochs", "2")
    assert "2 processes started by torchrun, backend gloo" in out
    assert len(_numbers(r"test accuracy ([\d.]+) on 297 images", out)) == 2
    resumed = _launch("two_machines.py", "--out", str(tmp_path), "--epochs", "3")
    assert "resumed from epoch-0001 (epoch 2)" in resumed and "epoch 3/3:" in resumed
