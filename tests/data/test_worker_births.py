"""Forked loader workers stuck at birth are replaced and the loop sees the same batches.

The real cause (CPython < 3.11.10 forking while a C++ thread holds the interpreter's thread-list
lock) cannot be made to happen on demand, so a fork hook re-creates its symptom in real worker
processes: a chosen fork's child blocks before the worker's first line ever runs.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

import paratrain as pt
from paratrain.data import worker_births
from tests.data.workers import IndexDataset

_hang = {"armed": False, "forks": 0, "targets": set()}


def _before_fork() -> None:
    if _hang["armed"]:
        _hang["forks"] += 1


def _in_child() -> None:
    if _hang["armed"] and (_hang["forks"] in _hang["targets"] or "all" in _hang["targets"]):
        while True:  # never reaches the worker's first line, as a child stuck inside fork()
            time.sleep(60)


os.register_at_fork(before=_before_fork, after_in_child=_in_child)


@pytest.fixture
def stuck_forks(monkeypatch):
    """Make the given forks (1-based, counted from now; "all" for every one) hang at birth."""
    monkeypatch.setattr(worker_births, "BIRTH_DEADLINE_S", 1.0)

    def arm(*targets):
        _hang.update(armed=True, forks=0, targets=set(targets))

    yield arm
    _hang.update(armed=False, forks=0, targets=set())


def loader(**options):
    options = {"num_workers": 2, "multiprocessing_context": "fork", "shuffle": True, "seed": 3, **options}
    return pt.make_loader(None, IndexDataset(23), batch_size=4, **options)


def passes(data, epochs: int) -> list[list[tuple[int, float]]]:
    return [[(i, round(x, 6)) for b in data for i, x in zip(b["id"].tolist(), b["noise"].tolist())]
            for _ in range(epochs)]


@pytest.mark.parametrize("persistent", [True, False])
def test_a_worker_stuck_at_birth_is_replaced_and_every_batch_is_unchanged(stuck_forks, persistent):
    expected = passes(loader(persistent_workers=persistent), epochs=3)
    data = loader(persistent_workers=persistent)
    stuck_forks(2)  # the second worker of the first pass: batch 0 is handed out, batch 1 never comes
    with pytest.warns(RuntimeWarning, match=r"worker 1 \(pid \d+\) stuck at birth .* 1 batch\(es\) of this pass"):
        got = passes(data, epochs=3)
    assert got == expected
    assert len(got[0]) == 23


def test_a_slow_batch_from_started_workers_is_waited_for(stuck_forks, recwarn):
    class Slow(IndexDataset):
        def __getitem__(self, i):
            if i == 0:
                time.sleep(2.5)  # longer than the birth deadline (1 s): not a stuck birth
            return super().__getitem__(i)

    data = pt.make_loader(None, Slow(8), batch_size=4, num_workers=2, multiprocessing_context="fork")
    assert sorted(i for b in data for i in b["id"].tolist()) == list(range(8))
    assert not [w for w in recwarn if "stuck at birth" in str(w.message)]


def test_the_users_own_timeout_still_ends_a_slow_batch(stuck_forks):
    class Slow(IndexDataset):
        def __getitem__(self, i):
            time.sleep(0.8)  # 3.2 s a batch
            return super().__getitem__(i)

    data = pt.make_loader(None, Slow(8), batch_size=4, num_workers=2, multiprocessing_context="fork", timeout=1.5)
    with pytest.raises(RuntimeError, match="DataLoader timed out after 1.5 seconds"):
        next(iter(data))


def test_workers_stuck_at_every_birth_end_in_one_clear_error(stuck_forks, monkeypatch):
    monkeypatch.setattr(worker_births, "MAX_REBIRTHS", 1)
    data = loader()
    stuck_forks("all")
    with pytest.raises(pt.DataError, match=r"stuck at birth 2 times in one pass .*3\.11\.10 .*forkserver"):
        with pytest.warns(RuntimeWarning):
            next(iter(data))


def test_only_forked_workers_are_watched():
    assert worker_births.forks_workers(torch.utils.data.DataLoader(range(4), num_workers=2, multiprocessing_context="fork"))
    assert not worker_births.forks_workers(torch.utils.data.DataLoader(range(4), num_workers=2,
                                                                       multiprocessing_context="spawn"))
    assert not worker_births.forks_workers(torch.utils.data.DataLoader(range(4)))
    spawned = pt.make_loader(None, IndexDataset(8), batch_size=4, num_workers=1, multiprocessing_context="spawn")
    assert spawned.dataloader.timeout == 0 and spawned._births is None
