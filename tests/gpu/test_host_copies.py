"""One GPU: a background save's host copies of CUDA tensors — one ``torch._foreach_copy_`` from the GPU into
page-locked buffers, queued without waiting; the writer waits for them — hold the values of the save."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from paratrain.checkpoint.packed import unpack
from paratrain.checkpoint.snapshot import HostBuffers

pytestmark = pytest.mark.gpu


def test_host_copies_of_cuda_tensors_are_page_locked_and_hold_the_values_queued_before_them():
    """Tensors on the GPU and on the CPU (AdamW's ``step``) in one state; the GPU changes them right after the copy
    is queued: after ``ready()`` the copies hold the values of the copy, in page-locked memory."""
    device = torch.device("cuda")
    weights = torch.randn(1024, 1024, device=device)
    state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": weights * 2, "exp_avg_sq": weights.square()}},
             "param_groups": [{"lr": 0.1, "params": [0]}]}
    expected = {key: value.to("cpu", copy=True) for key, value in state["state"][0].items()}
    weights_before = weights.to("cpu", copy=True)
    buffers = HostBuffers()
    model = buffers.copy({"w": weights}, ("model",))
    packed = buffers.packed(state, ("optimizer",))
    weights.add_(1.0)  # queued after the copies on the same stream: the copies must not see it
    state["state"][0]["exp_avg"].mul_(0)
    buffers.ready()
    assert model["w"].is_pinned() and all(flat.is_pinned() for flat in packed["flats"])
    assert torch.equal(model["w"], weights_before)
    copied = unpack(packed)["state"][0]
    assert all(torch.equal(copied[key], expected[key]) for key in expected)


def test_the_kept_host_copy_of_shards_holds_the_cuda_values_queued_before_it_once_ready():
    """The sharded path's kept copy (:class:`HostCopyOfShards`): one ``non_blocking`` foreach copy from the GPU into
    page-locked memory, for the training thread's part and the writing thread's; GPU work queued after them must not
    show once ``copy_the_rest`` (which waits for every copy of the save) has returned."""
    from paratrain.checkpoint.async_shards import HostCopyOfShards

    device = torch.device("cuda")
    weights = torch.randn(512, 512, device=device)
    state = {"model": {"w": weights}, "optimizer": {"state": {"w": {"exp_avg": weights * 3}}, "param_groups": [{}]}}
    expected = {"w": weights.to("cpu", copy=True), "exp_avg": (weights * 3).to("cpu", copy=True)}
    host = HostCopyOfShards()
    host.stage(state)
    staged = host.stage(state, later=["optimizer"])
    weights.add_(1.0)  # queued after the training thread's copy
    host.copy_the_rest(staged)
    state["optimizer"]["state"]["w"]["exp_avg"].mul_(0)  # after copy_the_rest returned: the copy is complete
    assert staged["model"]["w"].is_pinned() and torch.equal(staged["model"]["w"], expected["w"])
    assert torch.equal(staged["optimizer"]["state"]["w"]["exp_avg"], expected["exp_avg"])


def test_a_background_save_on_the_gpu_resumes_bit_identical(tmp_path):
    """Train 12 steps with a background save every 4; a new model and optimizer loaded from the save at step 8 and
    trained the last 4 steps end on the same weights."""
    batches = [torch.randn(16, 32, generator=torch.Generator().manual_seed(step)) for step in range(12)]

    def run(resume: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        rt = pt.Runtime(strategy="single", seed=0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        model, optimizer = rt.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
        ckpt = pt.Checkpointer(rt, tmp_path / ("resumed" if resume else "ckpt"), model=model, optimizer=optimizer,
                               background=True)
        start = ckpt.load(tmp_path / "ckpt" / "step-000008").step if resume else 0
        for step in range(start, 12):
            rt.backward(model(batches[step].to(rt.device)).square().mean())
            rt.step(optimizer)
            if (step + 1) % 4 == 0 and not resume:
                ckpt.save(step=step + 1)
        ckpt.finish_writing("the end of the test", say=False)
        weights = [p.detach().cpu().clone() for p in model.parameters()]
        ckpt.close()
        rt.close()
        return weights

    straight = run(resume=False)
    resumed = run(resume=True)
    assert all(torch.equal(a, b) for a, b in zip(straight, resumed))
