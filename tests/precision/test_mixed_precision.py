"""fp16-mixed and bf16-mixed on 2 real gloo processes (ddp and fsdp)."""

from __future__ import annotations

import pytest

import paratrain as pt
from tests.precision.workers import mixed_precision_on_two_ranks


@pytest.fixture(scope="module")
def out():
    return pt.spawn(mixed_precision_on_two_ranks, nprocs=2)


def test_fp16_overflowing_step_is_skipped_and_counted(out):
    overflow = out["overflow"]
    assert overflow["params_unchanged"] is True
    assert overflow["skipped_steps"] == 1
    assert overflow["scale_after"] == overflow["scale_before"] / 2
    assert overflow["result"] == (True, True, False)  # a step (its batch is consumed) that left the weights


def test_fp16_clip_norm_clips_the_unscaled_gradients(out):
    clip = out["clip"]
    assert clip["scale"] > 1000  # the raw gradients really were scaled
    assert clip["reported_norm"] == pytest.approx(clip["true_norm"], rel=1e-5)
    # SGD with lr=1 moves the weights by exactly the clipped gradient
    assert clip["update_norm"] == pytest.approx(clip["clip"], rel=1e-5)


def test_fp16_scaler_state_survives_save_and_load(out):
    assert out["loaded_precision"]["scaler"]["scale"] == 32768.0  # lowered by the skipped step
    assert out["loaded_precision"]["skipped_steps"] == 1
    assert out["loaded_precision"] != out["fresh_precision"]
    assert out["resumed_precision"] == out["uninterrupted_precision"]
    assert out["resumed"] == out["uninterrupted"]  # bit-identical continuation


@pytest.mark.parametrize("run", ["ddp_bf16-mixed", "fsdp_bf16-mixed", "fsdp_fp16-mixed"])
def test_mixed_precision_trains_to_a_lower_loss(out, run):
    result = out[run]
    assert result["after"] < 0.5 * result["before"]


def test_bf16_autocast_computes_in_bfloat16(out):
    assert out["bf16_output_dtype"] == "torch.bfloat16"
