"""Resume equivalence: stopped mid-epoch and resumed == never stopped, bit for bit."""

from __future__ import annotations

import pytest

import paratrain as pt
from tests.checkpoint import workers


def test_single_process_resume_is_bit_exact(tmp_path):
    rt = pt.Runtime(strategy="single", seed=workers.SEED)
    try:
        whole = workers.run(rt, None)
        stopped = workers.run(rt, str(tmp_path), stop_after=7)
        resumed = workers.run(rt, str(tmp_path), resume=True, init_seed=3)
    finally:
        rt.close()
    assert stopped["stopped_at"] == 7 and stopped["epoch"] == 0  # 10 batches per epoch: mid-epoch
    assert not workers.equal(whole["params"], stopped["params"])
    assert resumed["steps"] == whole["steps"] == 30
    assert resumed["resumed_epoch"] == 0
    assert workers.equal(whole["params"], resumed["params"])


@pytest.fixture(scope="module")
def ddp_ranks(tmp_path_factory):
    """One 2-rank ddp job (workers.ddp_resume): every rank's results."""
    return pt.spawn(workers.ddp_resume, 2, args=(str(tmp_path_factory.mktemp("ddp")),))["ranks"]


def test_two_rank_ddp_resume_is_bit_exact_and_failures_reach_every_rank(ddp_ranks):
    ranks = ddp_ranks
    for result in ranks:
        assert result["equal"], f"rank {result['rank']}: resumed parameters differ from the uninterrupted run"
        assert result["differs_at_stop"]
        assert result["steps"] == 15  # 3 epochs x 5 batches per rank
        assert result["resumed_epoch"] == 1  # stopped after step 7: epoch 1, batch 2
        assert result["saved_keys"] == [  # the user's names: no "module." from DDP
            "blocks.0.bias", "blocks.0.weight", "blocks.1.bias", "blocks.1.weight", "head.bias", "head.weight",
        ]
        # Rank 0 (the writer) failed; both ranks raised the same error naming it, nothing was left behind.
        assert result["failure"].startswith("rank 0: writing checkpoint step-000099: RuntimeError: state unavailable")
        assert result["files_after_failure"] == ["latest", "step-000007"]


def test_a_background_save_that_failed_on_one_rank_commits_nothing_and_the_next_save_or_close_names_it(ddp_ranks):
    # A background save returns before the ranks agree: rank 1's non-finite weights at step 6 (rank 0 copied
    # finite ones) and rank 0's moved run directory at step 12 are found by the writing threads before any
    # commit, and raised on every rank, naming the rank and the checkpoint, by the next save or close().
    for result in ddp_ranks:
        background = result["background"]
        raised = background["raised"]
        assert [step for step, error in raised.items() if error] == ["8", "close"], raised
        assert raised["8"].startswith("checkpoint step-000006 was not saved: rank 1: non-finite weights on this "
                                      "rank at step 6"), raised["8"]
        assert raised["close"].startswith("checkpoint step-000012 was not saved: rank 0: "), raised["close"]
        assert "was deleted or moved while this run wrote into it (at step 12)" in raised["close"]
        assert background["complete"] == ["step-000002", "step-000004", "step-000010"]  # nothing of 6, 8 or 12
        assert background["step_10_exact"]  # a save after a failed one is whole


def test_a_rank_that_never_reaches_a_background_saves_agreement_is_named_and_nothing_is_committed(tmp_path):
    # Rank 1 hangs where the save at step 6 is: rank 0's save returns (no collective in the training
    # thread), its writing thread waits PARATRAIN_TIMEOUT for rank 1, commits nothing, and rank 0's next save names it.
    first = pt.spawn(workers.late_rank, 2, args=(str(tmp_path),), env={"PARATRAIN_TIMEOUT": "8"})  # rank 0's
    assert first["rank"] == 0
    assert first["raised"] is not None and first["raised"].startswith("CollectiveTimeoutError: agreeing on checkpoint "
                                                                       "step-000006: rank(s) 1 did not arrive"), first
    assert first["complete"] == ["step-000002", "step-000004"]
