"""paratrain check on the shapes behind its wrong findings on the ninth, held-out corpus (read after its one scoring).

Each script here is written for the test (docs/check_corpus.md, "A ninth corpus, held out"): a print in the
parent beside `mp.spawn` of a function the script imports, a Fabric of one device, and a save under
`not args.multi_gpu or rank == 0`.
"""

from __future__ import annotations

from paratrain.diagnostics.check import check_source


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


def test_the_parent_of_mp_spawn_of_an_imported_function_prints_once():
    source = """\
import torch.multiprocessing as mp
from utils.train import train

if __name__ == "__main__":
    print("batch size per GPU: 16")
    mp.spawn(train, nprocs=2)
"""
    assert "print-on-every-rank" not in {rule for _, rule in rules(source)}
    beside = source.replace("from utils.train import train\n", "from utils.train import train\nprint('imported')\n")
    assert (3, "print-on-every-rank") in rules(beside)  # the module's top runs in every child too


def test_a_fabric_of_one_device_starts_no_other_process():
    source = """\
import torch
from lightning import Fabric

fabric = Fabric(accelerator="cuda", devices=1)
fabric.launch()
print("training")
torch.save({}, "model.pt")
"""
    assert not {rule for _, rule in rules(source)} & {"print-on-every-rank", "save-on-every-rank"}
    several = source.replace("devices=1", "devices=2")
    assert (6, "print-on-every-rank") in rules(several)


def test_a_save_where_the_run_is_one_process_or_rank_zero_is_once():
    source = """\
import torch
import torch.distributed as dist

def save(args, model):
    if not args.multi_gpu or (args.multi_gpu and args.rank == 0):
        torch.save(model.state_dict(), "model.pt")

dist.init_process_group("nccl")
"""
    assert "save-on-every-rank" not in {rule for _, rule in rules(source)}
    every = source.replace("not args.multi_gpu or (args.multi_gpu and args.rank == 0)", "args.multi_gpu or args.amp")
    assert (6, "save-on-every-rank") in rules(every)
