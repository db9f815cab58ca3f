"""The fit loop on two real processes (gloo): BatchNorm per rank and synchronised, uneven eval shards."""

from __future__ import annotations

import math

import pytest

import paratrain as pt
from tests.loop.workers import fit_multi_runs


@pytest.fixture(scope="module")
def runs() -> dict:
    """Both seg fits and the uneven-eval fit, in one 2-process job: one torch start for the three."""
    return pt.spawn(fit_multi_runs, 2, timeout=120)


def test_seg_trains_on_two_ranks_with_and_without_sync_batchnorm(runs):
    plain, synced = runs["seg"]
    for result in (plain, synced):
        assert result["world_size"] == 2 and result["steps"] == 16  # 64 samples / (2 ranks × 4) × 2 epochs
        assert result["metric"] == "miou" and math.isfinite(result["best_metrics"]["miou"])
        assert result["best_metrics"]["miou"] > 0.25  # above guessing one class everywhere (≤ 1/4 of 4 classes)
        assert "mIoU" in result["report"] and result["batchnorm_layers"] == 5
    # Per-rank BatchNorm sees 4 images; the synchronised one the global batch of 8 (the strategy's
    # SyncBatchNorm, or its gloo version on CPU), so the two runs train differently.
    assert not plain["sync_batchnorm"] and plain["batchnorm_kinds"] == ["BatchNorm2d"]
    assert synced["sync_batchnorm"] and len(synced["batchnorm_kinds"]) == 1 and "SyncBatchNorm" in synced["batchnorm_kinds"][0]
    assert synced["best_metrics"]["loss"] != plain["best_metrics"]["loss"]


def test_uneven_eval_shards_with_a_sharded_model_finish_and_count_every_sample_once(runs):
    # FSDP's forward gathers parameters from every rank: a rank with one batch fewer must still
    # take part, or the other waits for it forever.
    result = runs["uneven"]
    assert result["strategy"] == "fsdp" and result["steps"] == 4
    assert result["last_metrics"]["samples"] == 45
