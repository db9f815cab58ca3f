"""Length-grouped training order: similar lengths per step, every sample once, resumable."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import paratrain as pt
from paratrain.data import ResumableDistributedSampler
from paratrain.data.length_groups import MEGABATCH_GROUPS, group_by_length
from tests.data.workers import roundtrip

N, BATCH = 1003, 4
LENGTHS = [random.Random(index).randint(3, 96) for index in range(N)]


def _samplers(world: int, seed: int = 5, **options) -> list[ResumableDistributedSampler]:
    return [ResumableDistributedSampler(N, world, rank, seed=seed, group_by_length=LENGTHS, batch_size=BATCH, **options)
            for rank in range(world)]


def _steps(samplers: list[ResumableDistributedSampler]) -> list[list[list[int]]]:
    """Per step, every rank's batch."""
    shares = [list(sampler) for sampler in samplers]
    return [[share[i : i + BATCH] for share in shares] for i in range(0, len(shares[0]), BATCH)]


def _spread(batch: list[int]) -> int:
    return max(LENGTHS[i] for i in batch) - min(LENGTHS[i] for i in batch)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_each_step_of_the_job_holds_similar_lengths_and_every_sample_once(world):
    samplers = _samplers(world)
    for sampler in samplers:
        sampler.set_epoch(1)
    steps = _steps(samplers)
    seen = Counter(i for step in steps for batch in step for i in batch)
    assert set(seen) == set(range(N)) and sum(seen.values()) - N < world  # padding repeats < world samples
    spreads = [_spread([i for batch in step for i in batch]) for step in steps[:-1]]
    ungrouped = ResumableDistributedSampler(N, world, 0, seed=5)
    random_spreads = [_spread(list(ungrouped)[i : i + BATCH]) for i in range(0, N // world - BATCH, BATCH)]
    # Sorted megabatches of 50 global batches: a step's lengths lie within a few tokens.
    assert sum(spreads) / len(spreads) < 0.1 * sum(random_spreads) / len(random_spreads)


def test_epochs_differ_and_reruns_repeat():
    first, again = _samplers(2), _samplers(2)
    orders = []
    for epoch in (0, 1):
        for sampler in first + again:
            sampler.set_epoch(epoch)
        orders.append(list(first[0]))
        assert list(again[0]) == orders[-1]
    assert orders[0] != orders[1]


def test_the_order_is_a_permutation_with_a_short_last_group_at_the_end():
    order = list(range(N))
    random.Random(1).shuffle(order)
    grouped = group_by_length(order, LENGTHS, 8, None)
    assert sorted(grouped) == list(range(N))
    assert len(grouped[-(N % 8):]) == N % 8 and grouped[-(N % 8):] == sorted(grouped[-(N % 8):], key=lambda i: -LENGTHS[i])
    megabatch = grouped[: 8 * MEGABATCH_GROUPS]  # unshuffled: the first megabatch, longest first
    assert [LENGTHS[i] for i in megabatch] == sorted((LENGTHS[i] for i in megabatch), reverse=True)


def test_resume_mid_epoch_continues_the_same_sequence():
    sampler = _samplers(2)[1]
    sampler.set_epoch(3)
    whole = list(sampler)
    state = roundtrip(sampler.state_dict(position=5 * BATCH))
    resumed = ResumableDistributedSampler(N, 2, 1, seed=0, group_by_length=LENGTHS, batch_size=BATCH)
    resumed.load_state_dict(state)
    assert whole[: 5 * BATCH] + list(resumed) == whole


def test_a_different_world_size_shares_the_rest_of_the_epoch():
    old = _samplers(2)
    for sampler in old:
        sampler.set_epoch(1)
    consumed = 7 * BATCH
    seen = [i for sampler in old for i in list(sampler)[:consumed]]
    state = roundtrip(old[0].state_dict(position=consumed))
    new = _samplers(3, seed=0)
    for sampler in new:
        sampler.load_state_dict(state)
    rest = [i for sampler in new for i in list(sampler)]
    assert set(seen) | set(rest) == set(range(N)) and not set(seen) & set(rest[: len(rest) - 2])
    for sampler in new:
        sampler.set_epoch(2)  # the next epoch groups by the new world's batches
        assert sampler.group_size == 3 * BATCH


def test_grouped_and_ungrouped_states_do_not_mix():
    grouped, plain = _samplers(1)[0], ResumableDistributedSampler(N, 1, 0)
    with pytest.raises(pt.DataError, match="group_by_length"):
        plain.load_state_dict(grouped.state_dict())
    with pytest.raises(pt.DataError, match="group_by_length"):
        grouped.load_state_dict(plain.state_dict())
    old_state = {k: v for k, v in plain.state_dict().items() if k != "group_size"}  # saved before grouping existed
    ResumableDistributedSampler(N, 1, 0).load_state_dict(old_state)


@pytest.mark.parametrize("lengths,match", [
    ([1, 2], "2 lengths for a dataset of 1003"),
    ([-1] * N, "negative length"),
    (["x"] * N, "sequence of per-sample lengths"),
])
def test_bad_lengths_are_refused(lengths, match):
    with pytest.raises(pt.DataError, match=match):
        ResumableDistributedSampler(N, 1, 0, group_by_length=lengths)


def test_loader_refuses_grouping_for_exact_evaluation():
    with pytest.raises(pt.DataError, match="drop it for exact=True"):
        pt.data.make_loader(None, list(range(N)), 4, exact=True, group_by_length=LENGTHS)
