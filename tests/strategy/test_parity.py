"""ddp, fsdp and SyncBN on 2 real gloo processes give the numbers of one process with the whole batch."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from tests.strategy.recipes import BATCH, STEPS, run_single
from tests.strategy.workers import strategies_train_alike

RTOL = 5e-6  # float32 sums in another order: torch 2.9's FSDP2 reduce-scatter lands 1.1e-6 off one process


@pytest.fixture(scope="module")
def runs():
    """One 2-process job trains every variant; the references run here, in one process."""
    return pt.spawn(strategies_train_alike, nprocs=2)


@pytest.fixture(scope="module")
def single():
    return {
        "plain": run_single(batch=2 * BATCH),  # 2 ranks x BATCH
        "accumulated": run_single(batch=2 * 4 * BATCH, steps=5),  # 2 ranks x 4 micro-steps x BATCH
        "batchnorm": run_single(batch=2 * BATCH, steps=5, batchnorm=True),
    }


def assert_same_run(got: dict, want: dict, steps: int) -> None:
    assert len(got["losses"]) == len(want["losses"]) == steps
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(want["losses"]), rtol=RTOL, atol=0)
    assert got["state"].keys() == want["state"].keys()
    for name, values in want["state"].items():
        torch.testing.assert_close(torch.tensor(got["state"][name]), torch.tensor(values), rtol=RTOL, atol=RTOL)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_match_one_process_with_the_whole_batch(runs, single, strategy):
    assert_same_run(runs[strategy], single["plain"], STEPS)
    # the recipe clips at 0.5: the reported pre-clip norms match too (fsdp's spans both shards)
    torch.testing.assert_close(torch.tensor(runs[strategy]["norms"]), torch.tensor(single["plain"]["norms"]), rtol=1e-5, atol=0)
    assert max(single["plain"]["norms"]) > 0.5  # clipping really happened


def test_fsdp_matches_ddp_and_holds_half_the_parameters(runs):
    assert_same_run(runs["fsdp"], runs["ddp"], STEPS)
    fsdp = runs["fsdp"]
    assert fsdp["local_numel"] < 0.6 * fsdp["full_numel"]  # each rank keeps its shard (+ padding)
    # the optimizer was built before setup over unsharded parameters; setup repointed it
    assert fsdp["optimizer_params_sharded"] is True


@pytest.mark.parametrize("strategy", ["ddp_accum", "fsdp_accum"])
def test_four_micro_steps_equal_one_step_of_four_times_the_batch(runs, single, strategy):
    assert_same_run(runs[strategy], single["accumulated"], steps=5)


def test_accumulation_all_reduces_once_per_optimizer_step(runs):
    assert runs["ddp"]["allreduce_rounds"] == STEPS  # one per step without accumulation
    assert runs["ddp_accum"]["allreduce_rounds"] == 5  # 20 micro-steps, 4 per step


def test_sync_batchnorm_gives_the_statistics_of_the_global_batch(runs, single):
    synced, plain, want = runs["syncbn"], runs["plain_bn"], single["batchnorm"]
    assert synced["bn_class"] == "CPUSyncBatchNorm"
    assert_same_run(synced, want, steps=5)  # includes running_mean / running_var / num_batches_tracked
    # without SyncBN each rank normalises with its own half batch: the run differs
    diff = max(abs(a - b) for a, b in zip(plain["state"]["norm.running_var"], want["state"]["norm.running_var"]))
    assert diff > 1e-3
