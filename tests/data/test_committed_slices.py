"""The committed-sample cursor: one order per epoch, split over the groups of each step, moved only on commit."""

from __future__ import annotations

import pytest

from paratrain.data.committed_slices import CommittedSlices
from paratrain.errors import DataError


def test_a_dropped_step_retrains_its_slice_split_over_the_groups_of_the_next():
    slices = CommittedSlices(10, 4, seed=1)
    whole = slices.next_slice()
    parts3 = [slices.part(rank, 3) for rank in range(3)]
    assert [ids for part in parts3 for ids in part[0]] == whole  # contiguous, in order, nothing twice
    assert [len(ids) for ids, _ in parts3] == [2, 1, 1]
    # the mean over groups of each weighted part mean is the slice's mean (what the all-reduce computes)
    assert sum(weight * sum(ids) / len(ids) for ids, weight in parts3) / 3 == pytest.approx(sum(whole) / len(whole))
    # the step is dropped: the next one, with 2 groups, trains the same samples
    assert [ids for rank in range(2) for ids in slices.part(rank, 2)[0]] == whole


def test_groups_of_several_processes_split_each_slice_over_every_process_and_keep_its_mean():
    """3 groups of 2 processes: 6 parts, group-major; the last slice of the epoch (2 samples) leaves 4 processes a
    part of none, which trains the slice's first sample with weight 0."""
    slices = CommittedSlices(14, 12, seed=2)
    for step in range(2):
        whole = slices.next_slice()
        parts = [slices.part(group * 2 + rank, 6) for group in range(3) for rank in range(2)]
        trained = [i for ids, weight in parts if weight for i in ids]
        assert trained == whole  # every sample of the slice once, in order
        mean = sum(weight * sum(ids) / len(ids) for ids, weight in parts) / 6
        assert mean == pytest.approx(sum(whole) / len(whole))
        slices.commit()
    assert len(whole) == 2 and [weight for _, weight in parts] == [3.0, 3.0, 0.0, 0.0, 0.0, 0.0]
    assert all(ids == whole[:1] for ids, weight in parts if not weight)
    with pytest.raises(DataError, match="part 6 is outside the 6 parts"):
        slices.part(6, 6)
    assert slices.epoch_done


def test_every_sample_once_per_epoch_and_a_new_order_each_epoch():
    slices = CommittedSlices(10, 4, seed=1)
    epochs = []
    for _ in range(2):
        seen = []
        while not slices.epoch_done:
            seen += slices.next_slice()
            slices.commit()
        epochs.append(seen)
        slices.next_epoch()
    assert [sorted(seen) for seen in epochs] == [list(range(10))] * 2
    assert epochs[0] != epochs[1]


def test_the_state_travels_and_refuses_another_order():
    slices = CommittedSlices(10, 4, seed=1)
    slices.commit()
    other = CommittedSlices(10, 4, seed=1)
    other.load_state_dict(slices.state_dict())
    assert other.next_slice() == slices.next_slice()
    with pytest.raises(DataError, match="global_batch"):
        CommittedSlices(10, 5, seed=1).load_state_dict(slices.state_dict())
