"""Exact evaluation sharding: every sample once, contiguous blocks in rank order."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from paratrain.data import ExactShardSampler, shard_bounds


def test_blocks_cover_every_sample_once_in_order():
    for n in range(0, 14):
        for world in range(1, 6):
            blocks = [list(ExactShardSampler(n, world, rank)) for rank in range(world)]
            assert sum(blocks, []) == list(range(n)), (n, world)
            sizes = [len(b) for b in blocks]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
            assert [shard_bounds(n, world, r)[1] - shard_bounds(n, world, r)[0] for r in range(world)] == sizes


def test_exact_sampler_ignores_epochs_and_resumes_within_a_pass():
    sampler = ExactShardSampler(10, 3, 1)
    sampler.set_epoch(4)
    assert list(sampler) == [4, 5, 6]
    stream = iter(sampler)
    next(stream)
    resumed = ExactShardSampler(10, 3, 1)
    resumed.load_state_dict(sampler.state_dict())
    assert list(resumed) == [5, 6]
    moved = ExactShardSampler(10, 2, 1)  # another world size: blocks moved, the pass restarts
    moved.load_state_dict(sampler.state_dict())
    assert list(moved) == [5, 6, 7, 8, 9]


def test_single_process_gather_and_bad_ranks():
    t = torch.arange(3)
    assert pt.gather(t).tolist() == [0, 1, 2]
    preds, names = pt.gather(t, ["a", "b", "c"])
    assert preds.tolist() == [0, 1, 2] and names == ["a", "b", "c"]
    assert pt.gather({"k": 1}) == [{"k": 1}]
    with pytest.raises(pt.DataError, match="outside"):
        shard_bounds(5, 2, 3)
