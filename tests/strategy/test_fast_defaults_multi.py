"""Fast defaults on 2 real gloo processes: fused optimizers and compile under ddp and fsdp.

One job runs every variant (each process compiles the model a few times: ~20-60 s).
"""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from tests.strategy.fast_default_workers import STEPS, fast_defaults_on_two_ranks
from tests.strategy.test_compile import assert_compile_trains_like_eager
from tests.strategy.test_optimizer_kernels import ATOL


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return pt.spawn(fast_defaults_on_two_ranks, args=(["ddp", "fsdp"], str(tmp_path_factory.mktemp("ckpt"))), nprocs=2)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_fused_optimizer_trains_the_same_weights(runs, strategy):
    fused, loop = runs[strategy]["kernels"]["fused"], runs[strategy]["kernels"]["unfused"]
    assert (fused["fused"], loop["fused"]) == (True, False)  # fsdp: fused AdamW on DTensor shards
    for name, values in loop["state"].items():
        torch.testing.assert_close(torch.tensor(fused["state"][name]), torch.tensor(values), rtol=0, atol=ATOL)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_compile_trains_like_eager_and_resumes_exactly(runs, strategy):
    assert_compile_trains_like_eager(runs[strategy]["compile"])


def test_compiled_ddp_skips_the_all_reduce_of_accumulation_micro_steps(runs):
    # 2 micro-steps a step: one all-reduce per optimizer step, as eager (no_sync works under compile)
    compiled = runs["ddp"]["compile"]
    assert compiled["compiled"]["allreduce_rounds"] == compiled["eager"]["allreduce_rounds"] == STEPS


def test_ddp_gradients_are_views_of_its_buckets_unless_switched_off(runs):
    # What the view must keep correct (accumulation, clipping, exact resume) the runs above
    # and tests/strategy/test_parity.py prove with the default on.
    assert runs["bucket_view"] == {"default": True, "False": False}
