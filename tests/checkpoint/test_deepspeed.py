"""DeepSpeed ZeRO checkpoints: bit-exact resume at stages 2 and 3, loading at another world
size, stage and strategy, export. Needs the deepspeed package (in the ``test`` extra)."""

from __future__ import annotations

import subprocess

import pytest
import torch
from safetensors.torch import load_file

import paratrain as pt
from paratrain.checkpoint import Checkpointer, CheckpointWarning
from tests.checkpoint import workers
from tests.support import paratrain_cmd

pytest.importorskip("deepspeed", reason="strategy 'deepspeed' needs: pip install 'paratrain[deepspeed]'")
from tests.checkpoint import deepspeed_workers  # noqa: E402


@pytest.fixture(scope="module")
def zero_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("zero")
    return root, pt.spawn(deepspeed_workers.resume_and_save_stages, 2, args=([2, 3], str(root)))


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_resume_is_bit_exact(zero_runs, stage):
    result = zero_runs[1][stage]
    assert result["steps"] == 15
    assert result["differs_at_stop"]  # the stop really was mid-run
    assert result["bit_identical"]


def test_zero_checkpoint_is_one_file_set_with_whole_tensors(zero_runs):
    root, runs = zero_runs
    assert runs[3]["files"] == ["COMPLETE", "loader.pt", "manifest.json", "model.safetensors", "optimizer.pt",
                                "rng.pt", "scheduler.pt"]
    weights = load_file(str(root / "final3" / "step-000015" / "model.safetensors"))
    assert workers.equal(weights, runs[3]["params"])  # full shapes, not stage 3's empty placeholders


def test_two_rank_zero3_checkpoint_loads_at_three_ranks_and_stage_two(zero_runs):
    root, runs = zero_runs
    loaded = pt.spawn(deepspeed_workers.load, 3, args=(2, str(root / "final3")))
    assert loaded["world_size"] == 3 and loaded["step"] == 15
    assert workers.equal(loaded["params"], runs[3]["params"])
    for name, values in runs[3]["optimizer"].items():
        for key, tensor in values.items():
            assert torch.equal(loaded["optimizer"][name][key], tensor), f"optimizer {name}.{key}"
    assert loaded["trained"]


def test_zero_checkpoint_loads_into_one_plain_process_and_exports(zero_runs, tmp_path, cli_env):
    root, runs = zero_runs
    torch.manual_seed(123)
    model = workers.Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.7)  # as in the saved run (initial_lr)
    with pytest.warns(CheckpointWarning, match=r"saved by 2 rank\(s\) and is loaded by 1"):
        Checkpointer(None, root / "final2", model=model, optimizer=optimizer).resume()
    assert workers.equal(model.state_dict(), runs[2]["params"])
    names = [name for name, _ in model.named_parameters()]
    for index, values in optimizer.state_dict()["state"].items():
        for key, tensor in values.items():
            assert torch.equal(tensor, runs[2]["optimizer"][names[index]][key].reshape(tensor.shape)), key
    out = tmp_path / "zero.safetensors"
    done = subprocess.run(paratrain_cmd("ckpt", "export", str(root / "final3"), "-o", str(out)),
                          env=cli_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert workers.equal(load_file(str(out)), runs[3]["params"])
