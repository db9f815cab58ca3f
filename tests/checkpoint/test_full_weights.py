"""rt.full_state_dict / rt.save_weights on 2 real processes: the file `paratrain ckpt export` makes,
loading strictly into a fresh module in a plain process."""

from __future__ import annotations

import importlib.util
import subprocess

import pytest
import torch
from safetensors.torch import load_file

import paratrain as pt
from tests.checkpoint.full_weights_workers import full_weights_job
from tests.strategy.recipes import Net
from tests.support import clean_env, paratrain_cmd

STRATEGIES = ["ddp", "fsdp"] + (["deepspeed"] if importlib.util.find_spec("deepspeed") else [])


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    directory = tmp_path_factory.mktemp("weights")
    return directory, pt.spawn(full_weights_job, nprocs=2, args=(str(directory), STRATEGIES))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_saved_weights_equal_ckpt_export_and_load_strictly(job, strategy):
    directory, out = job
    result = out[strategy]
    exported = directory / strategy / "exported.safetensors"
    run = subprocess.run(
        paratrain_cmd("ckpt", "export", str(directory / strategy / "checkpoints"), "-o", str(exported)),
        env=clean_env(), capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    saved, reference = load_file(result["path"]), load_file(str(exported))
    assert saved.keys() == reference.keys() == set(Net().state_dict())  # no "module.", every tensor
    for name, tensor in reference.items():
        assert torch.equal(saved[name], tensor), name
    fresh = Net()
    fresh.load_state_dict(saved, strict=True)  # a plain process, a plain module
    assert result["keys"] == sorted(reference)
    assert result["plain"] and result["other_ranks_empty"]
    assert result["sum"] == {k: float(v.double().sum()) for k, v in saved.items()}


def test_full_state_dict_in_one_process_is_a_snapshot():
    rt = pt.Runtime(strategy="single", seed=0)
    model = rt.setup(torch.nn.Linear(2, 1))
    state = rt.full_state_dict(model)
    with torch.no_grad():
        model.weight.add_(1.0)
    assert not torch.equal(state["weight"], model.weight)


def test_exported_weights_get_the_usual_file_mode_and_force_keeps_the_replaced_ones(tmp_path):
    # Before: every export was 0600 (safetensors' temporary file), and --force turned a shared 0644 file into 0600.
    import os
    import stat

    from paratrain.checkpoint.export import write_weights_file

    state = {"w": torch.ones(2)}
    previous = os.umask(0o022)
    try:
        fresh = write_weights_file(state, tmp_path / "fresh.safetensors")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        shared = tmp_path / "shared.safetensors"
        write_weights_file(state, shared)
        shared.chmod(0o664)
        write_weights_file({"w": torch.zeros(2)}, shared)  # what --force does
        assert stat.S_IMODE(shared.stat().st_mode) == 0o664 and torch.equal(load_file(shared)["w"], torch.zeros(2))
    finally:
        os.umask(previous)
