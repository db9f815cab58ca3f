"""Generator states across a resume: every generator continues; on another number of visible GPUs,
this rank's GPU generator continues and the resume says it is not bit-exact (CUDA calls stubbed:
the choice of what to restore is the logic under test, not the device)."""

import random

import pytest
import torch

from paratrain.checkpoint import rng


def test_every_cpu_generator_continues_where_it_stopped():
    state = rng.capture()
    expected = (random.random(), torch.rand(3))
    rng.restore(state)
    again = (random.random(), torch.rand(3))
    assert again[0] == expected[0] and torch.equal(again[1], expected[1])


@pytest.mark.parametrize("written", ["tensor", "tuple of an older checkpoint"])
def test_pythons_generator_is_one_tensor_on_disk_and_an_older_tuple_still_restores(tmp_path, written):
    state = rng.capture()
    version, internal, gauss = state["python"]
    assert isinstance(internal, torch.Tensor) and internal.numel() == len(random.getstate()[1])
    if written != "tensor":
        state["python"] = random.getstate()
    torch.save(state, tmp_path / "rng.pt")
    expected = [random.random() for _ in range(3)]
    rng.restore(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert [random.random() for _ in range(3)] == expected


@pytest.mark.parametrize("visible", [2, 4])
def test_gpu_generators_on_the_same_or_another_number_of_gpus(monkeypatch, visible):
    set_all, set_one = [], []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", set_all.append)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: set_one.append((state, device)))
    state = {**rng.capture(), "cuda": [torch.tensor([1]), torch.tensor([2])], "cuda_device": 1}
    if visible == 2:
        rng.restore(state)
        assert len(set_all) == 1 and not set_one
    else:
        with pytest.warns(UserWarning, match=r"holds the random generators of 2 GPU\(s\) and this process sees 4"):
            rng.restore(state)
        assert not set_all and set_one == [(state["cuda"][1], 0)]  # the saved rank's device, on this one
