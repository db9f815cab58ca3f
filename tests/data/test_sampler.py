"""ResumableDistributedSampler: torch's DistributedSampler order, plus a resumable position."""

from __future__ import annotations

import itertools

import pytest
from torch.utils.data import DistributedSampler

import paratrain as pt
from paratrain.data import ResumableDistributedSampler
from tests.data.workers import roundtrip


@pytest.mark.parametrize("shuffle,drop_last", list(itertools.product([True, False], repeat=2)))
def test_order_equals_torch_distributed_sampler(shuffle, drop_last):
    for n, world in itertools.product([1, 2, 5, 10, 37], [1, 2, 3, 4]):
        if drop_last and n < world:
            continue
        for rank, epoch in itertools.product(range(world), range(3)):
            ours = ResumableDistributedSampler(n, world, rank, shuffle=shuffle, seed=11, drop_last=drop_last)
            theirs = DistributedSampler(range(n), world, rank, shuffle=shuffle, seed=11, drop_last=drop_last)
            ours.set_epoch(epoch)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs), (n, world, rank, epoch)
            assert len(ours) == len(theirs) == ours.num_samples


def test_standalone_resume_counts_yielded_indices():
    sampler = ResumableDistributedSampler(23, 2, 1, seed=3)
    sampler.set_epoch(2)
    whole = list(sampler)
    stream = iter(sampler)
    first = [next(stream) for _ in range(5)]
    state = roundtrip(sampler.state_dict())  # plain ints/bools: loads with weights_only=True
    assert state["epoch"] == 2 and state["position"] == 5

    resumed = ResumableDistributedSampler(23, 2, 1, seed=999)  # the saved seed wins
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # the loop may set the epoch again: the position stays
    assert first + list(resumed) == whole
    assert len(resumed) == len(whole) - 5
    resumed.set_epoch(3)
    assert resumed.position == 0 and len(resumed) == len(whole)


def test_a_finished_epoch_is_saved_as_the_start_of_the_next():
    sampler = ResumableDistributedSampler(10, 2, 0)
    list(sampler)
    state = sampler.state_dict()
    assert (state["epoch"], state["position"]) == (1, 0)


def test_world_size_change_mid_epoch_shares_the_remaining_samples():
    n, consumed_per_rank = 29, 4
    old = [ResumableDistributedSampler(n, 2, r, seed=1) for r in range(2)]
    for sampler in old:
        sampler.set_epoch(1)
    seen = [i for s in old for i in list(s)[:consumed_per_rank]]
    state = old[0].state_dict(position=consumed_per_rank)
    new = [ResumableDistributedSampler(n, 3, r, seed=1) for r in range(3)]
    for sampler in new:
        sampler.load_state_dict(state)
    rests = [list(s) for s in new]
    assert len({len(r) for r in rests}) == 1, "every new rank must take the same number of steps"
    assert set().union(*rests) | set(seen) == set(range(n)) and not set().union(*rests) & set(seen)
    for rank, sampler in enumerate(new):  # the next epoch is sharded normally
        sampler.set_epoch(2)
        reference = DistributedSampler(range(n), 3, rank, seed=1)
        reference.set_epoch(2)
        assert list(sampler) == list(reference)


def test_bad_rank_and_bad_state_are_refused():
    with pytest.raises(pt.DataError, match="outside"):
        ResumableDistributedSampler(10, 2, 2)
    sampler = ResumableDistributedSampler(10, 1, 0)
    with pytest.raises(pt.DataError, match="expected keys"):
        sampler.load_state_dict({"epoch": 1})
    with pytest.raises(pt.DataError, match="dataset of 12 samples, this one has 10"):
        sampler.load_state_dict(ResumableDistributedSampler(12, 1, 0).state_dict())
    with pytest.raises(pt.DataError, match="shuffle=False"):
        sampler.load_state_dict(ResumableDistributedSampler(10, 1, 0, shuffle=False).state_dict())
