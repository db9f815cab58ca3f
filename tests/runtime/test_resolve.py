"""runtime.resolve: the one place a run's settings become strategy, precision, backend,
device and TF32, checked against each other and the world size, without a process group."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from paratrain.runtime.resolve import resolve
from tests.runtime.fake_cuda import FakeCuda, tf32_restored  # noqa: F401 - the fixture


@pytest.mark.parametrize("world_size, strategy", [(1, "single"), (2, "ddp"), (8, "ddp")])
def test_auto_is_chosen_by_the_world_size(world_size, strategy):
    setup = resolve(world_size=world_size)
    assert (setup.strategy, setup.precision, setup.backend) == (strategy, "32-true", "gloo")
    assert setup.device == torch.device("cpu") and setup.tf32 is False


def test_one_process_drops_what_auto_was_asked_for_several():
    options = {"grad_compression": "bf16", "find_unused_parameters": True}
    assert dict(resolve(world_size=1, strategy_options=options).strategy_options) == {}
    assert dict(resolve(world_size=2, strategy_options=options).strategy_options) == options
    with pytest.raises(TypeError):  # what was resolved stays as resolved
        resolve(world_size=2, strategy_options=options).strategy_options["bucket_cap_mb"] = 1


@pytest.mark.parametrize(
    "settings, world_size, message",
    [
        ({"strategy": "dpp"}, 2, "unknown strategy 'dpp'; choose one of: auto, single, dp, ddp, fsdp, deepspeed"),
        ({"precision": "bf16"}, 2, "unknown precision 'bf16'; choose one of: 32-true, bf16-mixed, fp16-mixed"),
        ({"backend": "mpi"}, 2, "backend 'mpi' is not one of auto, gloo, nccl"),
        ({"strategy": "dp"}, 2, "strategy 'dp' runs one process over all GPUs, but this job has 2 processes"),
        ({"strategy": "fsdp"}, 1, "strategy 'fsdp' shards the model over processes, and this job has one"),
        ({"strategy": "ddp", "strategy_options": {"grad_compression": "zip"}}, 2, "zip"),
        ({"strategy": "ddp", "strategy_options": {"zero_stage": 2}}, 2, "strategy 'ddp' does not take zero_stage"),
        ({"strategy": "deepspeed", "strategy_options": {"zero_stage": 5}}, 2, "zero_stage must be 1, 2 or 3, got 5"),
        ({"strategy": "deepspeed", "sync_batchnorm": True}, 2, "sync_batchnorm and compile are not supported"),
        ({"tf32": "no"}, 1, "tf32 must be a bool"),
    ],
)
def test_what_the_job_cannot_run_is_refused_without_a_process_group(settings, world_size, message):
    if settings.get("strategy") == "deepspeed":
        pytest.importorskip("deepspeed")
    with pytest.raises(pt.ConfigError) as info:
        resolve(world_size=world_size, **settings)
    assert message in str(info.value)


def test_tf32_is_on_only_where_it_means_something(monkeypatch, tf32_restored):
    assert resolve(world_size=1, tf32=True).tf32 is False  # CPU
    FakeCuda(monkeypatch, visible=2)
    assert resolve(world_size=2, local_rank=1, tf32=True).tf32 is True
    assert resolve(world_size=2, local_rank=1, tf32=False).tf32 is False


def test_the_launcher_resolves_the_device_type_without_touching_a_gpu(monkeypatch, tf32_restored):
    fake = FakeCuda(monkeypatch, visible=1, native_bf16=False)
    launcher = resolve(world_size=2, precision="bf16-mixed")  # no local rank: which GPU is each worker's own
    assert launcher.device == torch.device("cuda") and launcher.backend == "nccl" and fake.calls == []
    with pytest.raises(pt.ConfigError, match="this GPU has no bf16"):  # the worker checks its own GPU
        resolve(world_size=2, local_rank=0, precision="bf16-mixed")
    assert fake.names()[:2] == ["set_device", "is_bf16_supported"]
