"""`paratrain ckpt inspect|export` through the real CLI."""

from __future__ import annotations

import subprocess

import pytest
import torch
from safetensors.torch import load_file

import paratrain as pt
from paratrain.checkpoint import Checkpointer
from tests.checkpoint.workers import Net
from tests.support import paratrain_cmd


@pytest.fixture
def checkpoint(tmp_path):
    rt = pt.Runtime(strategy="single", seed=0)
    try:
        model = rt.setup(Net())
        ckpt = Checkpointer(rt, tmp_path / "run" / "checkpoints", model=model)
        path = ckpt.save(step=120, epoch=2, metrics={"accuracy": 0.75})
    finally:
        rt.close()
    return path, {k: v.clone() for k, v in model.state_dict().items()}


def cli(env, *args):
    return subprocess.run(paratrain_cmd("ckpt", *args), env=env, capture_output=True, text=True)


def test_inspect_shows_counters_config_files_and_tensors(checkpoint, cli_env):
    path, _ = checkpoint
    done = cli(cli_env, "inspect", str(path.parent.parent))  # the run directory: its newest checkpoint
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "step-000120" in out and "step 120  epoch 2" in out
    assert "world size 1  strategy single  precision 32-true  sharded False" in out
    assert "metrics accuracy=0.75" in out and "checksums all ok" in out
    assert "model.safetensors" in out and "rng.pt" in out
    assert "model:blocks.0.weight" in out and "[16, 6]" in out and "float32" in out and "384 B" in out


def test_export_refuses_to_overwrite_without_force(checkpoint, tmp_path, cli_env):
    path, weights = checkpoint
    out = tmp_path / "model.safetensors"
    out.write_text("keep me")
    refused = cli(cli_env, "export", str(path), "-o", str(out))
    assert refused.returncode == 1
    assert refused.stderr.strip().count("\n") == 0 and "already exists; pass --force" in refused.stderr
    assert out.read_text() == "keep me"
    done = cli(cli_env, "export", str(path), "-o", str(out), "--force")
    assert done.returncode == 0, done.stderr
    exported = load_file(str(out))
    assert exported.keys() == weights.keys() and all(torch.equal(exported[k], weights[k]) for k in weights)
