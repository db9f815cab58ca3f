"""Two GPUs over NCCL: ddp, fsdp and deepspeed train as one process does, SyncBatchNorm,
one GPU per task, and a process group the user made.

Tolerances: float32 (TF32 off) — losses and weights within rtol 1e-4 / atol 1e-5 (the
all-reduce sums in another order than one process's batch); bf16-mixed — rtol 2e-2 /
atol 2e-3 (bfloat16 keeps 8 significant bits: ~4e-3 relative per rounding, over 10 steps).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import paratrain as pt
from tests.gpu.workers import ddp_with_sync_batchnorm, deepspeed_zero2, gpu_per_task, in_a_users_nccl_group, trained
from tests.strategy.recipes import BATCH

pytestmark = pytest.mark.gpu

TOLERANCE = {"32-true": {"rtol": 1e-4, "atol": 1e-5}, "bf16-mixed": {"rtol": 2e-2, "atol": 2e-3}}


def assert_close(ranks: dict, single: dict, precision: str) -> None:
    tol = TOLERANCE[precision]
    torch.testing.assert_close(torch.tensor(ranks["losses"]), torch.tensor(single["losses"]), **tol)
    for key, values in single["state"].items():
        torch.testing.assert_close(torch.tensor(ranks["state"][key]), torch.tensor(values), **tol, msg=key)


@pytest.fixture(scope="module")
def single():
    """The one-process reference per precision, on this process's GPU, with the whole batch."""
    def run(precision: str, **options) -> dict:
        return trained("single", precision, batch=BATCH * 2, **options)
    return run


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_gpus_train_as_one_process(two_gpus, single, strategy, precision):
    if precision == "bf16-mixed" and torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("bf16-mixed needs native bf16 (Ampere or newer)")
    ranks = pt.spawn(trained, nprocs=2, args=(strategy, precision), timeout=300)
    assert ranks["backend"] == "nccl" and ranks["device"] == "cuda:0"
    assert_close(ranks, single(precision), precision)


def test_deepspeed_on_two_gpus_trains_as_one_process(two_gpus, single):
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install paratrain[deepspeed])")
    assert_close(pt.spawn(deepspeed_zero2, nprocs=2, timeout=300), single("32-true"), "32-true")


def test_sync_batchnorm_on_nccl_uses_the_global_batch_statistics(two_gpus, single):
    ranks = pt.spawn(ddp_with_sync_batchnorm, nprocs=2, timeout=300)
    assert ranks["syncbn"]  # torch.nn.SyncBatchNorm on CUDA
    assert_close(ranks, single("32-true", batchnorm=True), "32-true")


def test_one_gpu_per_task_gives_each_rank_its_own_gpu(two_gpus):
    assert pt.spawn(gpu_per_task, nprocs=2, timeout=300) == ("cuda:0", "distinct")


def test_a_runtime_inside_the_users_nccl_group_runs_cpu_collectives_on_gloo(two_gpus):
    assert pt.spawn(in_a_users_nccl_group, nprocs=2, timeout=300) == 4.0
