"""The global order: one order and one global batch for the job, split over the ranks of the moment."""

from __future__ import annotations

import itertools

import pytest
import torch

from paratrain.data import make_loader
from paratrain.data.global_loader import GlobalOrderLoader
from paratrain.data.global_order import GlobalBatchSampler, Split, choose_split, split_global_batch
from paratrain.errors import DataError
from tests.data.workers import roundtrip


def steps(sampler: GlobalBatchSampler) -> list[list[int]]:
    """Each global batch of the next pass, as the union of every rank's micro-batches (real samples only)."""
    ranks = [GlobalBatchSampler(sampler.dataset_len, sampler.split, r, sampler.shuffle, sampler.seed,
                                sampler.drop_last, sampler.lengths) for r in range(sampler.split.world_size)]
    result: list[list[int]] = []
    for rank in ranks:
        rank.epoch, rank.position, rank.group_size = sampler.epoch, sampler.position, sampler.group_size
        iter(rank)
        step = 0
        for micro in rank.plan:
            if len(result) <= step:
                result.append([])
            result[step].extend(micro.indices[: micro.samples])
            step += micro.sync
    return [sorted(batch) for batch in result]


@pytest.mark.parametrize("grouped", [False, True])
def test_every_world_size_trains_the_same_global_batches(grouped):
    n, lengths = 101, [(7 * i) % 40 for i in range(101)]
    reference = None
    for world, micro, accumulation in [(1, 12, 1), (2, 6, 1), (3, 2, 2), (4, 3, 1), (6, 1, 2), (12, 1, 1)]:
        sampler = GlobalBatchSampler(n, Split(world, micro, accumulation), 0, seed=5,
                                     group_by_length=lengths if grouped else None)
        sampler.set_epoch(3)
        got = steps(sampler)
        assert sorted(itertools.chain(*got)) == list(range(n))  # every sample once per epoch
        assert [len(batch) for batch in got] == [12] * 8 + [5]
        reference = reference or got
        assert got == reference, (world, micro, accumulation)


@pytest.mark.parametrize("total,world,micro", [(12, 2, 3), (5, 2, 3), (5, 3, 2), (5, 4, 3), (2, 3, 1), (7, 2, 1)])
def test_weighted_micro_batches_give_the_global_mean(total, world, micro):
    values = torch.randn(total, dtype=torch.float64)
    batch = list(range(total))
    split = Split(world, micro, 99)
    mean = 0.0
    for rank in range(world):
        micros = split_global_batch(batch, split, rank)
        assert micros[-1].sync and not any(m.sync for m in micros[:-1])
        for m in micros:
            assert len(m.indices) <= micro and m.step_samples == total
            # what DDP (mean over ranks) and rt.step (mean over micro-steps) make of the weighted micro-batch losses
            mean += m.loss_weight * values[m.indices].mean().item() / (world * m.micro_steps)
    assert mean == pytest.approx(values.mean().item(), rel=1e-12)
    micro_steps = {m.micro_steps for r in range(world) for m in split_global_batch(batch, split, r)}
    assert len(micro_steps) == 1  # every rank takes the same number of micro-steps


def test_choose_split_keeps_the_global_batch_or_names_the_world_sizes_that_can():
    assert choose_split(12, 1, 3) == Split(1, 3, 4)
    assert choose_split(12, 3, 3) == Split(3, 2, 2)  # 4 per rank: the largest micro-batch up to 3 that divides it
    assert choose_split(12, 4, 8) == Split(4, 3, 1)
    with pytest.raises(DataError, match=r"global batch of 12 samples cannot be split over 5 processes.*run on 1, 2, 3, 4, 6, 12 process"):
        choose_split(12, 5, 3)


def resumed(state: dict, world: int, micro: int, rank: int = 0) -> GlobalBatchSampler:
    sampler = GlobalBatchSampler(53, Split(world, micro, 1), rank, seed=1)
    sampler.load_state_dict(roundtrip(state))
    return sampler


def test_a_saved_position_resumes_at_the_same_global_batch_on_another_world_size():
    saved = GlobalBatchSampler(53, Split(2, 3, 2), 0, seed=1)
    saved.set_epoch(1)
    whole = steps(saved)
    state = saved.state_dict(position=2)
    assert state["global_batch"] == 12 and state["epoch"] == 1 and state["position"] == 2
    for world, micro in [(1, 3), (3, 3), (4, 3)]:
        sampler = resumed(state, world, micro)
        assert sampler.global_batch == 12 and sampler.epoch == 1
        assert steps(sampler) == whole[2:]
    with pytest.raises(DataError, match="cannot be split over 5 processes"):
        resumed(state, 5, 3)


def test_an_older_per_rank_loader_state_continues_at_its_next_samples():
    dataset = torch.utils.data.TensorDataset(torch.arange(40))
    old = make_loader(None, dataset, 4, shuffle=True, seed=2)
    stream = iter(old)
    seen = [next(stream)[0].tolist() for _ in range(3)]
    new = make_loader(None, dataset, 4, shuffle=True, seed=9, global_order=True)
    assert isinstance(new, GlobalOrderLoader)
    new.load_state_dict(roundtrip(old.state_dict()))
    assert not new.keeps_trajectory  # its world size decided the batches: the restore warns as before
    rest = [batch[0].tolist() for batch in new]
    assert sorted(itertools.chain(*seen, *rest)) == list(range(40))
    assert rest == [batch[0].tolist() for batch in stream]  # one process: the very same batches


def test_a_loader_state_counts_whole_global_batches():
    dataset = torch.utils.data.TensorDataset(torch.arange(30))
    loader = make_loader(None, dataset, 4, shuffle=True, global_order=True, grad_accum=2)
    assert (loader.global_batch, loader.global_batches_per_epoch, loader.steps_per_epoch) == (8, 4, 8)
    stream = iter(loader)
    for _ in range(3):
        next(stream)
    assert loader.current.sync is False and loader.state_dict()["batches"] == 1  # the half-done one is redone
    next(stream)
    assert loader.current.sync and loader.state_dict()["batches"] == 2
    for _ in stream:
        pass
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 0)  # a finished epoch is the start of the next


def test_global_order_is_for_training_loaders():
    dataset = torch.utils.data.TensorDataset(torch.arange(30))
    with pytest.raises(DataError, match="global_order orders training batches; drop it for exact=True"):
        make_loader(None, dataset, 4, exact=True, global_order=True)
    with pytest.raises(DataError, match="grad_accum"):
        make_loader(None, dataset, 4, global_order=True, grad_accum=0)
    with pytest.raises(DataError, match="30 samples hold no full one of 32"):
        make_loader(None, dataset, 4, global_order=True, grad_accum=8, drop_last=True)
