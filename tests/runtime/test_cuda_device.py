"""Which GPU a process takes, and the order of the CUDA calls in building a Runtime,
on a CPU torch with the device queries faked (tests/runtime/fake_cuda.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import paratrain as pt
from paratrain.env import ProcessInfo
from paratrain.runtime.device import gpu_index, resolve_device
from tests.runtime.fake_cuda import FakeCuda, tf32_restored  # noqa: F401 - the fixture


@pytest.mark.parametrize("local_rank, visible, index", [(0, 1, 0), (0, 4, 0), (3, 4, 3), (1, 1, 0), (7, 1, 0)])
def test_a_local_rank_maps_onto_the_visible_gpus(local_rank, visible, index):
    # One visible GPU for local rank 1: srun --gpus-per-task=1 or CUDA_VISIBLE_DEVICES=$LOCAL_RANK.
    assert gpu_index(local_rank, visible) == index


@pytest.mark.parametrize("local_rank, visible", [(2, 2), (4, 4), (0, 0)])
def test_more_local_ranks_than_several_gpus_are_refused_with_the_fixes(local_rank, visible):
    with pytest.raises(pt.ConfigError, match=f"local rank {local_rank} has no GPU .{visible} visible.*--gpus-per-task"):
        gpu_index(local_rank, visible)


def test_one_gpu_per_task_gives_local_rank_1_its_own_gpu(monkeypatch):
    FakeCuda(monkeypatch, visible=1)
    assert resolve_device("nccl", 1) == torch.device("cuda", 0)


def test_the_rank_s_gpu_is_current_before_the_bf16_check(monkeypatch, tf32_restored):
    # Local rank 1, kept to one process (no group to join): what the first steps of a Runtime see.
    monkeypatch.setattr("paratrain.runtime.runtime.detect", lambda: ProcessInfo(
        rank=0, local_rank=1, world_size=1, local_world_size=2, node_rank=0, num_nodes=1,
        master_addr=None, master_port=None, source="single"))
    fake = FakeCuda(monkeypatch, visible=2, native_bf16=False)
    with pytest.raises(pt.ConfigError, match="this GPU has no bf16.*fp16-mixed"):
        pt.Runtime(strategy="single", precision="bf16-mixed")
    # set_device first: torch's bf16 check reads the current device (GPU 0 otherwise, a
    # context there from every rank); without emulation a T4/V100 is refused, not emulated.
    assert fake.calls[0] == ("set_device", 1)
    assert ("is_bf16_supported", 1, False) in fake.calls


def test_a_gpu_with_native_bf16_passes_the_check(monkeypatch, tf32_restored):
    fake = FakeCuda(monkeypatch, visible=1, native_bf16=True)
    with pytest.raises(pt.ConfigError) as info:  # the probe kernel cannot run on a CPU torch
        pt.Runtime(strategy="single", precision="bf16-mixed")
    assert "this GPU has no bf16" not in str(info.value)
    assert fake.names()[:2] == ["set_device", "is_bf16_supported"]


def test_deepspeed_is_given_the_runtime_s_gpu_not_local_rank(monkeypatch, tf32_restored):
    # DeepSpeed would set_device(LOCAL_RANK) itself: local rank 1 with one GPU per task has only cuda:0.
    pytest.importorskip("deepspeed")
    monkeypatch.setattr("paratrain.runtime.runtime.detect", lambda: ProcessInfo(
        rank=0, local_rank=1, world_size=1, local_world_size=2, node_rank=0, num_nodes=1,
        master_addr=None, master_port=None, source="single"))
    FakeCuda(monkeypatch, visible=1)
    rt = pt.Runtime(strategy="deepspeed")
    calls = []
    rt.strategy.deepspeed = SimpleNamespace(initialize=lambda **kw: calls.append(kw) or ("engine", None, None, None))
    model = torch.nn.Linear(2, 1)
    rt.strategy.wrap(model, [torch.optim.SGD(model.parameters(), lr=0.1)])
    assert rt.device == torch.device("cuda", 0) and calls[0]["args"].device_rank == 0
