"""Loaders, exact evaluation, gather and global means on 2 and 3 real gloo processes.

One pt.spawn per world size runs every check (tests/data/workers.py) and returns
what each rank saw; the tests below assert on it. The metrics layer's distributed
behaviour (global means, reports on gathered predictions) is proven here too,
because it comes out of the same runs.
"""

from __future__ import annotations

import pytest
import torch
from sklearn.metrics import classification_report as sk_report
from torch.utils.data import DistributedSampler

import paratrain as pt
from tests.data.workers import IndexDataset, ScoredDataset, ids, predict, three_rank_checks, two_rank_checks


def reference(n: int, world: int, rank: int, epoch: int, shuffle: bool = True, seed: int = 0, drop_last: bool = False):
    """torch's DistributedSampler order for the same seed and epoch."""
    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def single_process_eval(n: int) -> dict:
    data = ScoredDataset(n)
    logits = predict(data.x)
    return {
        "preds": logits.argmax(1).tolist(),
        "labels": data.y.tolist(),
        "loss": torch.nn.functional.cross_entropy(logits, data.y).item(),
    }


@pytest.fixture(scope="module")
def two():
    return pt.spawn(two_rank_checks, 2)


@pytest.fixture(scope="module")
def single_rank_state():
    """A 1-process training state after epoch 0 and 3 batches of epoch 1."""
    loader = pt.make_loader(None, IndexDataset(37), batch_size=4, shuffle=True, seed=5)
    ids(loader)
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    return loader.state_dict()


@pytest.fixture(scope="module")
def three(single_rank_state):
    return pt.spawn(three_rank_checks, 3, args=(single_rank_state,))


def test_three_epochs_on_two_ranks_shuffle_shard_and_cover(two):
    per_rank = two["epochs"]  # [rank][epoch] -> ids in the order seen
    assert two["len"] == [5, 5]
    for epoch in range(3):
        shard0, shard1 = per_rank[0][epoch], per_rank[1][epoch]
        assert len(shard0) == len(shard1) == 20
        assert not set(shard0) & set(shard1), "shards overlap"
        assert sorted(shard0 + shard1) == list(range(40)), "union is not the dataset"
        for rank in range(2):
            assert per_rank[rank][epoch] == reference(40, 2, rank, epoch, seed=7)
    for rank in range(2):
        epochs = per_rank[rank]
        assert epochs[0] != epochs[1] and epochs[1] != epochs[2] and epochs[0] != epochs[2]


@pytest.mark.parametrize("case", ["shuffled", "ordered", "workers"])
def test_resume_mid_epoch_on_two_ranks_yields_the_remaining_batches(two, case):
    runs = two[f"resume_{case}"]
    for rank, run in enumerate(runs):
        full = run["full"]  # [epoch][batch] -> ids
        assert sum(full[1], []) == reference(37, 2, rank, 1, shuffle=case != "ordered", seed=5)
        assert run["resumed"] == full[1][3:] + full[2]
        assert run["explicit"] == full[1][3:] + full[2]
        assert run["lengths"] == [2, 5, 5]  # the resumed pass has 2 batches left; later ones are whole
        assert run["state"]["epoch"] == 1 and run["state"]["batches"] == 3
        assert run["state"]["sampler"]["position"] == 12
    assert runs[0]["state"] == runs[1]["state"], "the loader state must be the same on every rank"
    if case == "workers":
        # Worker seeds are per rank and reproducible: a rerun draws the same numbers, the other rank others.
        assert [run["noise_epoch0"] == run["noise_epoch0_rerun"] for run in runs] == [True, True]
        assert runs[0]["noise_epoch0"] != runs[1]["noise_epoch0"]


def test_state_taken_after_the_last_batch_resumes_at_the_next_epoch(two):
    for run in two["resume_at_end"]:
        assert run["state"]["epoch"] == 1 and run["state"]["batches"] == 0
        assert run["resumed"] == run["full"][1] + run["full"][2]


def test_two_rank_state_resumes_on_one_rank_with_the_remaining_samples(two):
    runs = two["resume_shuffled"]
    loader = pt.make_loader(None, IndexDataset(37), batch_size=4, shuffle=True, seed=5)
    loader.load_state_dict(runs[0]["state"])
    rest = sum(ids(loader), [])
    seen = sum(runs[0]["full"][1][:3] + runs[1]["full"][1][:3], [])
    assert len(rest) == 37 - 24 and sorted(rest + seen) == list(range(37))
    assert sum(ids(loader), []) == reference(37, 1, 0, 2, seed=5)  # the next epoch is whole again


def test_one_rank_state_resumes_on_three_ranks(three, single_rank_state):
    runs = three["elastic"]
    seen = reference(37, 1, 0, 1, seed=5)[:12]
    rests = [run["rest"] for run in runs]
    assert [len(rest) for rest in rests] == [9, 9, 9]  # 25 remaining samples, padded to 27
    assert set().union(*rests) == set(range(37)) - set(seen)
    assert [run["epoch"] for run in runs] == [2, 2, 2]
    for rank, run in enumerate(runs):
        assert run["next"] == reference(37, 3, rank, 2, seed=5)


@pytest.mark.parametrize("world", [2, 3])
def test_exact_eval_on_101_samples_equals_one_process(two, three, world):
    runs = (two if world == 2 else three)["eval"]
    single = single_process_eval(101)
    assert [run["shard"] for run in runs] == ([51, 50] if world == 2 else [34, 34, 33])
    for run in runs:  # every rank gets the gathered result
        assert run["ids"] == list(range(101))
        assert run["preds"] == single["preds"] and run["labels"] == single["labels"]
        assert run["accuracy"] == pt.accuracy(single["preds"], single["labels"])  # exactly
        assert run["names"] == [f"s{i}" for i in range(101)]
        # Loss is the mean over the 101 samples, not the mean of per-rank means.
        assert run["loss"] == pytest.approx(single["loss"], rel=1e-12)
    assert runs[0]["names_on_0"] == [f"s{i}" for i in range(101)]
    assert all(run["names_on_0"] is None for run in runs[1:])


@pytest.mark.parametrize("world", [2, 3])
def test_report_on_gathered_predictions_matches_sklearn(two, three, world):
    single = single_process_eval(101)
    expected = sk_report(single["labels"], single["preds"], target_names=["neg", "neu", "pos"], output_dict=True)
    report = (two if world == 2 else three)["eval"][0]["report"]
    assert report["accuracy"] == expected["accuracy"]
    for name in ("neg", "neu", "pos"):
        got, want = report["classes"][name], expected[name]
        assert (got["precision"], got["recall"], got["f1"], got["support"]) == (
            want["precision"], want["recall"], want["f1-score"], want["support"])
    for avg in ("macro avg", "weighted avg"):
        got, want = report[avg], expected[avg]
        assert (got["precision"], got["recall"], got["f1"]) == (want["precision"], want["recall"], want["f1-score"])


def test_exact_eval_with_fewer_samples_than_ranks(two, three):
    for runs, shards, n in ((two["eval_tiny"], [1, 0], 1), (three["eval_tiny"], [1, 1, 0], 2)):
        assert [run["shard"] for run in runs] == shards
        assert [run["batches"] for run in runs] == [min(s, 1) for s in shards]
        for run in runs:
            assert run["ids"] == list(range(n))
            assert run["dtype"] == "torch.int64"  # the empty rank's float tensor took the others' dtype
            assert run["preds"] == single_process_eval(n)["preds"]


def test_dataset_lengths_that_differ_across_ranks_fail_on_every_rank(two):
    for message in two["mismatch"]:
        assert "dataset length differs across ranks (rank 0: 20, rank 1: 19)" in message


def test_training_with_fewer_samples_than_ranks_says_what_to_do(two):
    for message in two["too_few"]:
        assert "1 sample(s) for 2 ranks" in message and "run at most 1 process" in message


def test_global_mean_weights_by_count(two):
    # rank 0: mean 1.0 over 1 sample; rank 1: mean 4.0 over 3 samples. Mean of means would be 2.5.
    assert two["global_mean"] == two["global_mean_tensor"] == two["running_mean"] == 3.25


def test_gather_objects_one_entry_per_rank(two):
    assert two["objects"] == [{"rank": 0}, {"rank": 1}]
