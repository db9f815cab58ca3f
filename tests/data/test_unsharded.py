"""The runtime twin of `paratrain check`: a multi-rank job training on a loader every rank reads whole."""

from __future__ import annotations

from torch.utils.data import DataLoader

import paratrain as pt
from paratrain.data.unsharded import is_sharded
from tests.data.unsharded_workers import train_on_each_kind_of_loader


def test_training_on_an_unsharded_loader_warns_once_on_rank_zero_naming_it():
    out = pt.spawn(train_on_each_kind_of_loader, 2)
    assert out["per_rank"] == [1, 0]  # rank 0 speaks for the job
    (message,) = out["messages"]
    assert message.startswith("DataLoader `loader` over TensorDataset (32 samples), iterated at ")
    assert "unsharded_workers.py:" in message
    assert "has no distributed sampler: each of the 2 ranks trains on the whole dataset" in message
    assert "sampler=DistributedSampler(dataset)" in message and "rt.loader(" in message
    assert out["iter_after_close"] == "__iter__"  # rt.close() put DataLoader back as it was


def test_one_process_is_never_watched():
    rt = pt.Runtime()
    try:
        assert DataLoader.__iter__.__name__ == "__iter__"
        assert not is_sharded(DataLoader(list(range(4))))
    finally:
        rt.close()
