"""The DistributedSampler rules of paratrain check on sampler shapes: a name bound to two samplers, and
samplers made inside the DataLoader call or by a function of the file (each script written for the test)."""

from __future__ import annotations

from paratrain.diagnostics.check import check_source


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


def test_each_binding_of_a_sampler_name_needs_set_epoch():
    source = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
dist.init_process_group("nccl")
train_sampler = DistributedSampler(range(8))
loader = DataLoader(range(8), sampler=train_sampler)
train_sampler = DistributedSampler(range(16))
loader = DataLoader(range(16), sampler=train_sampler)
"""
    assert rules(source) == [(5, "no-set-epoch"), (7, "no-set-epoch")]


def test_a_sampler_made_by_a_helper_of_the_file_needs_set_epoch():
    source = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

def data_sampler(dataset, shuffle, distributed):
    if distributed:
        return DistributedSampler(dataset, shuffle=shuffle)
    return RandomSampler(dataset)

def batches(loader):
    while True:
        for batch in loader:
            yield batch

dist.init_process_group("nccl")
loader = DataLoader(range(8), sampler=data_sampler(range(8), shuffle=True, distributed=True))
for step, batch in zip(range(100), batches(loader)):
    pass
"""
    assert rules(source) == [(6, "no-set-epoch")]
    assert rules(source.replace("shuffle=True, distributed", "shuffle=False, distributed")) == []
    assert rules(source.replace("    pass\n", "    loader.sampler.set_epoch(step)\n")) == []
    inline = source.replace("sampler=data_sampler(range(8), shuffle=True, distributed=True)",
                            "sampler=DistributedSampler(range(8))")
    assert rules(inline) == [(15, "no-set-epoch")]


def test_a_sampler_stored_in_a_dict_whose_item_gets_set_epoch_is_not_reported():
    stored = """
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("nccl")
train_sampler = DistributedSampler(train_set)
loaders = {"train": DataLoader(train_set, sampler=train_sampler, batch_size=8)}
loaders["train_sampler"] = train_sampler
for epoch in range(10):
    loaders["train_sampler"].set_epoch(epoch)
    for batch in loaders["train"]:
        pass
"""
    assert [f.rule for f in check_source(stored)].count("no-set-epoch") == 0
    never_set = stored.replace('    loaders["train_sampler"].set_epoch(epoch)\n', "")
    assert [(f.line, f.rule) for f in check_source(never_set) if f.rule == "no-set-epoch"] == [(6, "no-set-epoch")]


def test_a_sampler_handed_on_as_one_side_of_an_or_or_a_conditional_is_passed():
    """minimind: ``SkipBatchSampler(train_sampler or indices, ...)`` feeds ``batch_sampler=``; the sampler where there
    is one, a plain list of indices in one process."""
    source = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from samplers import SkipBatchSampler
dist.init_process_group("nccl")
data = list(range(8))
train_sampler = DistributedSampler(data) if dist.is_initialized() else None
for epoch in range(3):
    train_sampler and train_sampler.set_epoch(epoch)
    {hand_on}
    loader = DataLoader(data, batch_sampler=batches)
"""
    for hand_on in ("batches = SkipBatchSampler(train_sampler or list(range(8)), 2, 0)",
                    "batches = SkipBatchSampler(train_sampler if train_sampler else list(range(8)), 2, 0)"):
        assert rules(source.format(hand_on=hand_on)) == []
    assert rules(source.format(hand_on="batches = SkipBatchSampler(list(range(8)), 2, 0)")) == [(7, "sampler-not-passed")]


_EVAL_HEAD = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
dist.init_process_group("nccl")
"""


def test_an_evaluation_loader_nothing_iterates_is_not_reported():
    # LLaMA-Adapter's gorilla finetune builds data_loader_val and never calls its evaluation
    source = _EVAL_HEAD + """\
val_sampler = DistributedSampler(range(10), shuffle=False)
val_loader = DataLoader(range(10), sampler=val_sampler)
"""
    assert rules(source) == []


def test_an_evaluation_loader_returned_only_into_underscores_is_not_reported():
    # PVD: `dataloader, _, train_sampler, _ = get_dataloader(...)` discards the test loader and its sampler
    source = _EVAL_HEAD + """\
def get_loaders(train_set, test_set):
    train_sampler = DistributedSampler(train_set)
    test_sampler = DistributedSampler(test_set, shuffle=False)
    test_loader = DataLoader(test_set, sampler=test_sampler)
    return DataLoader(train_set, sampler=train_sampler), test_loader, train_sampler, test_sampler

loader, _, train_sampler, _ = get_loaders(range(8), range(10))
for epoch in range(2):
    train_sampler.set_epoch(epoch)
    for batch in loader:
        pass
"""
    assert rules(source) == []


def test_an_evaluation_loader_that_is_iterated_or_kept_by_a_caller_is_reported():
    iterated = _EVAL_HEAD + """\
val_sampler = DistributedSampler(range(10), shuffle=False)
val_loader = DataLoader(range(10), sampler=val_sampler)
accuracy = sum(batch for batch in val_loader)
"""
    assert rules(iterated) == [(4, "padded-eval-sampler")]
    kept = _EVAL_HEAD + """\
def get_loaders(test_set):
    test_sampler = DistributedSampler(test_set, shuffle=False)
    return DataLoader(test_set, sampler=test_sampler), test_sampler

test_loader, _ = get_loaders(range(10))
accuracy = sum(batch for batch in test_loader)
"""
    assert rules(kept) == [(5, "padded-eval-sampler")]



LIGHTNING = """\
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, DistributedSampler


class {base_name}({base}):
    def _loader(self, dataset, is_train):
        sampler = DistributedSampler(dataset, shuffle=is_train) if self.trainer.use_ddp else None
        return DataLoader(dataset, batch_size=4, sampler=sampler)

    def train_dataloader(self):
        return self._loader(range(8), True)


trainer = pl.Trainer(gpus=2, distributed_backend="ddp")
"""


def test_a_sampler_a_lightning_module_makes_gets_its_epochs_from_lightning():
    """Lightning's fit loop calls set_epoch on the sampler of the loader it trains on (longformer's scripts)."""
    for base in ("pl.LightningModule", "pl.LightningDataModule"):
        assert [r for r in rules(LIGHTNING.format(base_name="Summarizer", base=base)) if r[1] == "no-set-epoch"] == []
    # the same method in a plain class is the user's to call set_epoch for
    assert (8, "no-set-epoch") in rules(LIGHTNING.format(base_name="Summarizer", base="object"))
