"""strategy='deepspeed': ZeRO 1-3 on 2 real gloo processes give the numbers of one process
with the whole batch. Needs the deepspeed package (in the ``test`` extra)."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from tests.strategy.recipes import BATCH, STEPS, run_single
from tests.strategy.test_parity import RTOL, assert_same_run

pytest.importorskip("deepspeed", reason="strategy 'deepspeed' needs: pip install 'paratrain[deepspeed]'")
from tests.strategy.deepspeed_workers import zero_stages_train_alike  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return pt.spawn(zero_stages_train_alike, nprocs=2)


@pytest.fixture(scope="module")
def single():
    return {"plain": run_single(batch=2 * BATCH), "accumulated": run_single(batch=2 * 4 * BATCH, steps=5)}


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_two_ranks_match_one_process_with_the_whole_batch(runs, single, stage):
    run = runs[f"zero{stage}"]
    assert_same_run(run, single["plain"], STEPS)
    # the engine clips at gradient_clipping=0.5 and reports the pre-clip global norm
    torch.testing.assert_close(torch.tensor(run["norms"]), torch.tensor(single["plain"]["norms"]), rtol=1e-5, atol=0)
    assert max(single["plain"]["norms"]) > 0.5


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_without_clipping_asked_follows_ddp_step_by_step(runs, stage):
    """Nothing asks for clipping: the engine must not clip at DeepSpeed's own default norm of 1.0."""
    ddp, zero = runs["unclipped"]["ddp"], runs["unclipped"][f"zero{stage}"]
    assert max(zero["norms"]) > 1.5  # the engine's pre-clip norms: steps that a norm-1 clip would change
    torch.testing.assert_close(torch.tensor(zero["losses"]), torch.tensor(ddp["losses"]), rtol=RTOL, atol=0)


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_four_micro_steps_equal_one_step_of_four_times_the_batch(runs, single, stage):
    assert_same_run(runs[f"zero{stage}_accum"], single["accumulated"], steps=5)


def test_zero3_partitions_the_module_parameters(runs):
    full = sum(len(values) for values in runs["zero3"]["state"].values())
    assert runs["zero3"]["local_numel"] < 0.6 * full  # its slice (+ padding) of every parameter
    assert runs["zero2"]["local_numel"] == full  # stages 1-2 partition optimizer state and gradients only


def test_zero_bf16_mixed_trains_to_a_lower_loss(runs):
    run = runs["zero2_bf16-mixed"]
    assert run["loss_after"] < 0.5 * run["loss_before"]


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_optimizer_state_keeps_each_groups_parameters(runs, stage):
    body = ["inp.weight", "inp.bias", "blocks.0.linear.weight", "blocks.0.linear.bias",
            "blocks.1.linear.weight", "blocks.1.linear.bias"]
    assert runs["two_groups"][stage] == [{"params": body, "lr": 0.05}, {"params": ["head.weight", "head.bias"], "lr": 0.01}]


def test_a_clip_norm_other_than_the_engines_is_refused(runs):
    assert "gradient_clipping=1.0" in runs["zero2"]["other_clip_norm"]
