"""paratrain check on the shapes behind its false findings and misses on the eighth corpus of public scripts.

Each script here is written for the test (docs/check_corpus.md, "An eighth corpus"): a DataParallel subclass of
the script's own, torch's replicate/parallel_apply by hand, a one-process group on an in-process store, a
local-rank flag overwritten by the script's own process starter, Lightning's once-per-machine prepare_data and
its BatchNorm trained on several devices, loguru's logger on every rank, and Accelerate's prepared model saved
with its wrapper's keys.
"""

from __future__ import annotations

from paratrain.diagnostics.check import check_source


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


def test_a_dataparallel_subclass_of_the_script_is_data_parallel_and_its_state_dict_a_wrappers():
    source = """\
import torch

class KeepAttrs(torch.nn.DataParallel):
    def __getattr__(self, name):
        return getattr(self.module, name)

class Deeper(KeepAttrs):
    pass

nets = {"enc": torch.nn.Linear(2, 2), "dec": torch.nn.Linear(2, 2)}
for key in nets:
    nets[key] = KeepAttrs(nets[key])
loss = Deeper(torch.nn.MSELoss())
torch.save({key: nets[key].state_dict() for key in nets}, "ckpt.pt")
"""
    found = rules(source)
    assert (12, "data-parallel") in found and (13, "data-parallel") in found
    assert (14, "wrapped-state-dict") in found
    plain = source.replace("torch.nn.DataParallel", "torch.nn.Module")
    assert not {rule for _, rule in rules(plain)} & {"data-parallel", "wrapped-state-dict"}


def test_torchs_replicate_by_hand_is_data_parallel():
    source = """\
import torch
from torch.nn.parallel.parallel_apply import parallel_apply
from torch.nn.parallel.replicate import replicate

def forward(layers, x, devices):
    copies = replicate(layers, devices)
    return parallel_apply(copies, x.chunk(len(devices)))
"""
    assert (6, "data-parallel") in rules(source)
    assert not rules(source.replace("copies = replicate(", "copies = copy_to("))


def test_a_one_process_group_on_an_in_process_store_is_no_hard_coded_rendezvous():
    source = """\
import torch.distributed as dist

def ensure_group():
    if not dist.is_initialized():
        dist.init_process_group(world_size=1, rank=0, store=dist.HashStore())
"""
    assert "hardcoded-rendezvous" not in {rule for _, rule in rules(source)}
    fixed = source.replace("world_size=1, rank=0, store=dist.HashStore()", "world_size=2, rank=0")
    assert (5, "hardcoded-rendezvous") in rules(fixed)


def test_a_local_rank_flag_overwritten_before_the_scripts_own_processes_start_is_not_read():
    source = """\
import argparse
import torch
from torch.multiprocessing import Process

def worker(rank, args):
    torch.cuda.set_device(args.local_rank)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.add_argument("--procs", type=int, default=2)
    args = parser.parse_args()
    for rank in range(args.procs):
        args.local_rank = rank
        Process(target=worker, args=(rank, args)).start()
"""
    assert "local-rank-argument" not in {rule for _, rule in rules(source)}
    kept = source.replace("        args.local_rank = rank\n", "")
    assert (10, "local-rank-argument") in rules(kept)


def test_lightning_prepare_data_runs_once_per_machine_and_batchnorm_on_several_devices_is_found():
    source = """\
import torch
import lightning as L

class Data(L.LightningDataModule):
    def prepare_data(self):
        print("converting once per machine")

    def setup(self, stage=None):
        print("reading in every process")

class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(8)

trainer = L.Trainer(accelerator="gpu", devices=4, strategy="ddp")
trainer.fit(Net(), Data())
"""
    found = rules(source)
    assert (9, "print-on-every-rank") in found and (6, "print-on-every-rank") not in found
    assert (14, "batchnorm-without-syncbn") in found
    synced = source.replace('strategy="ddp")', 'strategy="ddp", sync_batchnorm=True)')
    assert "batchnorm-without-syncbn" not in {rule for _, rule in rules(synced)}


def test_loguru_logs_on_every_rank_unless_its_sink_is_chosen_by_rank():
    source = """\
import os
import torch.distributed as dist
from loguru import logger

dist.init_process_group("nccl")
logger.info("starting")
"""
    assert (6, "log-on-every-rank") in rules(source)
    chosen = source.replace('logger.info("starting")',
                            'logger.remove()\nif dist.get_rank() == 0:\n    logger.add("log.txt")\nlogger.info("starting")')
    assert "log-on-every-rank" not in {rule for _, rule in rules(chosen)}


def test_a_model_prepared_by_accelerate_saves_its_wrappers_keys():
    source = """\
import torch
from accelerate import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
if accelerator.is_main_process:
    torch.save(model.state_dict(), "model.pt")
"""
    assert (9, "wrapped-state-dict") in rules(source)
    unwrapped = source.replace("model.state_dict()", "accelerator.unwrap_model(model).state_dict()")
    assert "wrapped-state-dict" not in {rule for _, rule in rules(unwrapped)}


def test_a_script_that_takes_local_rank_runs_on_several_processes():
    source = """\
import argparse
from loguru import logger

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, help="set by the launcher")
args = parser.parse_args()
logger.info(f"arguments: {args}")
"""
    assert (7, "log-on-every-rank") in rules(source)
    assert not rules(source.replace('parser.add_argument("--local_rank", type=int, help="set by the launcher")\n', ""))
