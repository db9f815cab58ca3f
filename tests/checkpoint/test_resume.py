"""Resume equivalence: stopped mid-epoch and resumed == never stopped, bit for bit."""

from __future__ import annotations

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


def test_two_rank_ddp_resume_is_bit_exact_and_failures_reach_every_rank(tmp_path):
    ranks = pt.spawn(workers.ddp_resume, 2, args=(str(tmp_path),))["ranks"]
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
