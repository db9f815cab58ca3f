"""fsdp checkpoints: DCP shards, resume equivalence, resharding to 1 and 3 ranks, export."""

from __future__ import annotations

import subprocess

import pytest
import torch
from safetensors.torch import load_file

import paratrain as pt
from paratrain.checkpoint import Checkpointer, CheckpointWarning, export
from paratrain.checkpoint.safe_load import load_pt
from tests.checkpoint import workers
from tests.checkpoint.helpers import save_steps
from tests.support import paratrain_cmd


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    """One 2-rank fsdp job: resume equivalence, a sharded checkpoint, a failure on rank 1."""
    root = tmp_path_factory.mktemp("fsdp")
    result = pt.spawn(workers.fsdp_resume_and_save, 2, args=(str(root / "resume"), str(root / "sharded")))
    return root, result


def test_fsdp_resume_matches_uninterrupted_run(fsdp_run):
    _, result = fsdp_run
    assert result["steps"] == 15
    assert result["max_diff"] <= 1e-6


def test_fsdp_checkpoint_is_sharded_by_dcp_and_sealed(fsdp_run):
    _, result = fsdp_run
    files, shards = result["listing"]
    assert files == ["COMPLETE", "loader.pt", "manifest.json", "rng.pt", "scheduler.pt", "sharded"]
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]


def test_failure_on_one_rank_before_the_shards_is_an_error_on_every_rank(fsdp_run):
    _, result = fsdp_run
    for message in result["failure"]:
        assert message.startswith("rank 1: not enough disk space")
    assert result["after_failure"] == ["latest", "step-000015"]  # nothing half-written left


def test_two_rank_fsdp_checkpoint_loads_on_three_ranks_as_does_a_one_file_one(fsdp_run, tmp_path):
    root, saved = fsdp_run
    one_file = save_steps(tmp_path, steps=(1,))[1]  # one process, no wrapper: model.safetensors + optimizer.pt
    loaded = pt.spawn(workers.fsdp_load, 3, args=(str(root / "sharded"), str(tmp_path)))
    assert loaded["world_size"] == 3 and loaded["step"] == 15
    assert workers.equal(loaded["params"], saved["params"])
    for name, values in saved["optimizer"].items():
        for key, tensor in values.items():
            assert torch.equal(loaded["optimizer"][name][key], tensor), f"optimizer {name}.{key}"
    assert any("saved by 2 rank(s) and is loaded by 3" in w for w in loaded["warnings"])
    assert loaded["trained"]
    # The one-file checkpoint of a plain single-process model loads into the fsdp shards too.
    assert workers.equal(loaded["one_file_params"], one_file)
    saved_optimizer = load_pt(tmp_path / "step-000001" / "optimizer.pt")["state"]
    for name, values in saved_optimizer.items():
        for key, tensor in values.items():
            assert torch.equal(loaded["one_file_optimizer"][name][key], tensor), f"optimizer {name}.{key}"


def test_two_rank_fsdp_checkpoint_loads_in_one_plain_process(fsdp_run):
    root, saved = fsdp_run
    torch.manual_seed(123)
    model = workers.Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    with pytest.warns(CheckpointWarning, match=r"saved by 2 rank\(s\) and is loaded by 1"):
        state = Checkpointer(None, root / "sharded", model=model, optimizer=optimizer).resume()
    assert state.step == 15
    assert workers.equal(model.state_dict(), saved["params"])
    names = dict(zip(range(len(list(model.parameters()))), [n for n, _ in model.named_parameters()]))
    for index, values in optimizer.state_dict()["state"].items():
        for key, tensor in values.items():
            assert torch.equal(tensor, saved["optimizer"][names[index]][key])


def test_export_of_a_sharded_checkpoint_is_one_plain_file(fsdp_run, tmp_path, cli_env):
    root, saved = fsdp_run
    summary = export(root / "sharded", tmp_path / "api.safetensors")
    assert summary["tensors"] == len(saved["params"])
    out = tmp_path / "cli.safetensors"
    done = subprocess.run(paratrain_cmd("ckpt", "export", str(root / "sharded"), "-o", str(out)),
                          env=cli_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout
    for path in (tmp_path / "api.safetensors", out):
        weights = load_file(str(path))
        assert workers.equal(weights, saved["params"])
        model = workers.Net()
        model.load_state_dict(weights)  # strict: plain PyTorch code loads it as is
