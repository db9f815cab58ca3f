"""make_loader / rt.loader in one process: epochs, resume, defaults and bad input."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DistributedSampler, IterableDataset, SequentialSampler

import paratrain as pt
from tests.data.workers import IndexDataset, ids, resume_case


def reference(n: int, epoch: int, shuffle: bool = True, seed: int = 0) -> list[int]:
    sampler = DistributedSampler(range(n), num_replicas=1, rank=0, shuffle=shuffle, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_mid_epoch_on_one_rank(shuffle):
    make = lambda: pt.make_loader(None, IndexDataset(37), batch_size=4, shuffle=shuffle, seed=5)  # noqa: E731
    run = resume_case(make, epochs=3, stop_epoch=1, stop_after=4)
    for epoch in range(3):
        assert sum(run["full"][epoch], []) == reference(37, epoch, shuffle, seed=5)
    assert run["resumed"] == run["explicit"] == run["full"][1][4:] + run["full"][2]
    assert run["lengths"] == [6, 10, 10]
    assert run["state"]["sampler"]["position"] == 16


def test_each_iteration_is_the_next_epoch_and_set_epoch_selects_one():
    loader = pt.make_loader(None, IndexDataset(12), batch_size=5, shuffle=True, seed=2)
    assert len(loader) == loader.steps_per_epoch == 3
    seen = [sum(ids(loader), []) for _ in range(3)]
    assert seen == [reference(12, e, seed=2) for e in range(3)] and loader.epoch == 2
    loader.set_epoch(1)
    assert sum(ids(loader), []) == seen[1]


def test_resume_with_another_batch_size_continues_at_the_same_sample():
    loader = pt.make_loader(None, IndexDataset(20), batch_size=4, shuffle=True)
    batches = iter(loader)
    consumed = next(batches)["id"].tolist() + next(batches)["id"].tolist()
    state = loader.state_dict()
    bigger = pt.make_loader(None, IndexDataset(20), batch_size=6, shuffle=True)
    bigger.load_state_dict(state)
    rest = ids(bigger)
    assert [len(b) for b in rest] == [6, 6] and consumed + sum(rest, []) == reference(20, 0)


def test_drop_last_state_after_the_last_full_batch_is_the_next_epoch():
    loader = pt.make_loader(None, IndexDataset(10), batch_size=4, drop_last=True)
    batches = iter(loader)
    next(batches), next(batches)  # both full batches; the partial one is dropped
    assert len(loader) == loader.steps_per_epoch == 2
    state = loader.state_dict()
    assert (state["epoch"], state["batches"]) == (1, 0)


def test_a_user_sampler_gets_set_epoch_and_resume():
    data = IndexDataset(15)
    make = lambda: pt.make_loader(None, data, batch_size=4, sampler=DistributedSampler(data, 1, 0, seed=8))  # noqa: E731
    run = resume_case(make, epochs=2, stop_epoch=0, stop_after=2)
    assert [sum(epoch, []) for epoch in run["full"]] == [reference(15, 0, seed=8), reference(15, 1, seed=8)]
    assert run["resumed"] == run["full"][0][2:] + run["full"][1]
    sequential = pt.make_loader(None, data, batch_size=15, sampler=SequentialSampler(data))
    assert ids(sequential) == [list(range(15))]


def test_runtime_loader_defaults_and_gather():
    rt = pt.Runtime(seed=3)
    try:
        train = rt.loader(IndexDataset(8), batch_size=2, shuffle=True, num_workers=1, multiprocessing_context="fork")
        assert train.dataloader.persistent_workers and not train.dataloader.pin_memory  # no CUDA here
        assert sum(ids(train), []) == reference(8, 0, seed=3)  # the runtime's seed orders the data
        dev = rt.loader(IndexDataset(5), batch_size=2, exact=True)
        assert not dev.dataloader.persistent_workers
        gathered = rt.gather(torch.cat([b["id"] for b in dev]))
        assert gathered.tolist() == [0, 1, 2, 3, 4]
        del train
    finally:
        rt.close()


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(3))


class Unsized(torch.utils.data.Dataset):
    def __getitem__(self, i):
        return i


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(batch_size=0), "batch_size must be a positive integer"),
        (dict(batch_size=-2), "batch_size must be a positive integer"),
        (dict(batch_size=2.5), "batch_size must be a positive integer"),
        (dict(batch_size=True), "batch_size must be a positive integer"),
        (dict(dataset=Stream()), "IterableDataset.*__getitem__ and __len__"),
        (dict(dataset=Unsized()), "no len\\(\\)"),
        (dict(shuffle=True, sampler=SequentialSampler(range(4))), "drop shuffle=True"),
        (dict(exact=True, sampler=SequentialSampler(range(4))), "drop the sampler"),
        (dict(exact=True, shuffle=True), "exact=True keeps dataset order"),
        (dict(exact=True, drop_last=True), "drop drop_last=True"),
        (dict(batch_sampler=[[0, 1]]), "batch_sampler"),
        (dict(dataset=IndexDataset(0)), "the dataset is empty"),
        (dict(dataset=IndexDataset(3), drop_last=True), "no full batch"),
    ],
)
def test_bad_input_is_a_one_line_data_error(kwargs, match):
    options = {"dataset": IndexDataset(4), "batch_size": 4, **kwargs}
    with pytest.raises(pt.DataError, match=match) as info:
        pt.make_loader(None, **options)
    assert "\n" not in str(info.value)


def test_a_bad_loader_state_is_refused():
    loader = pt.make_loader(None, IndexDataset(10), batch_size=2)
    with pytest.raises(pt.DataError, match="expected keys"):
        loader.load_state_dict({"epoch": 3})
    other = pt.make_loader(None, IndexDataset(11), batch_size=2)
    with pytest.raises(pt.DataError, match="11 samples, this one has 10"):
        loader.load_state_dict(other.state_dict())
