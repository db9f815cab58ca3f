"""Shapes of public training code that ``paratrain check`` answered wrongly on held-out corpora, each written
again here in a few lines: a rank named ``world_rank``, a warning printed only by an older torch, and a sampler a
data module hands back to a caller that sets its epoch."""

from __future__ import annotations

from paratrain.diagnostics.check import check_file, check_source
from tests.diagnostics.test_check_project_imports import project, script_text


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


def test_a_save_under_a_test_of_world_rank_runs_once_per_job():
    source = """\
import torch
import torch.distributed as dist

class Trainer:
    def __init__(self, model, world_rank):
        self.model = model
        self.world_rank = world_rank

    def train(self):
        for epoch in range(3):
            if self.world_rank == 0:
                self.save_checkpoint("ckpt.tar")

    def save_checkpoint(self, path):
        torch.save({"model": self.model.state_dict()}, path)

dist.init_process_group("nccl")
Trainer(torch.nn.Linear(2, 2), dist.get_rank()).train()
"""
    assert rules(source) == []
    every_rank = source.replace("            if self.world_rank == 0:\n                self.save_checkpoint",
                                "            if epoch >= 0:\n                self.save_checkpoint")
    assert rules(every_rank) == [(15, "save-on-every-rank")]


def test_a_print_only_an_older_torch_makes_is_not_a_print_on_every_rank(tmp_path):
    model = """\
        import torch

        class Attention(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
                if not self.flash:
                    print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")
                {print_always}
        """
    body = """\
        from model import Attention
        dist.init_process_group("nccl")
        attention = Attention()
        """
    quiet = project(tmp_path / "probe", {"train.py": script_text(body), "model.py": model.format(print_always="")})
    assert [f for f in check_file(quiet) if f.rule == "print-on-every-rank"] == []
    loud = project(tmp_path / "always", {"train.py": script_text(body),
                                         "model.py": model.format(print_always='print("attention built")')})
    [finding] = [f for f in check_file(loud) if f.rule == "print-on-every-rank"]
    assert "model.py:9" in finding.problem


def _data_module(set_epoch_in_main: bool, handed_back: str) -> dict[str, str]:
    epoch = "    loader.sampler.set_epoch(epoch)\n" if set_epoch_in_main else ""
    return {
        "data/build.py": f"""\
import torch
from torch.utils.data import DataLoader, DistributedSampler

def build_loader(dataset):
    sampler_train = DistributedSampler(dataset, shuffle=True)
    data_loader_train = DataLoader(dataset, sampler=sampler_train, batch_size=8)
    return {handed_back}
""",
        "main.py": f"""\
import torch.distributed as dist
from data.build import build_loader

dist.init_process_group("nccl")
loader = build_loader(list(range(64)))
for epoch in range(3):
{epoch}    for batch in loader:
        pass
""",
    }


def test_a_sampler_or_its_loader_handed_back_to_a_caller_that_sets_the_epoch_needs_no_set_epoch_here(tmp_path):
    for handed_back in ("data_loader_train", "data_loader_train, sampler_train"):
        for sets_epoch in (True, False):
            root = tmp_path / f"{len(handed_back)}-{sets_epoch}"
            files = _data_module(sets_epoch, handed_back)
            data = project(root, files)
            found = [(f.line, f.rule) for f in check_file(data) if f.rule == "no-set-epoch"]
            # no file of the project calls set_epoch: nothing sets it, and the finding stands
            assert found == ([] if sets_epoch else [(5, "no-set-epoch")]), (handed_back, sets_epoch, found)


_SAVER = """\
import torch

def checkpoint(config, model=None, optimizer=None, save_dir="ckpt"):
    path = f"{save_dir}/{config}.pth"
    if model is not None:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    else:
        return torch.load(path)

def convert(model, output="converted.pt", return_model=True):
    converted = model
    if return_model:
        return converted
    torch.save(converted, output)
"""


def test_a_project_saver_called_without_the_argument_its_save_needs_only_loads_or_returns(tmp_path):
    body = """\
        from helpers import checkpoint, convert
        dist.init_process_group("nccl")
        model = torch.nn.Linear(2, 2)
        state = checkpoint("base", save_dir="out")
        converted = convert(model)
        {saving}
        """
    quiet = project(tmp_path / "loads", {"train.py": script_text(body.format(saving="")), "helpers.py": _SAVER})
    assert [f for f in check_file(quiet) if f.rule == "save-on-every-rank"] == []
    saving = "checkpoint('base', model, save_dir='out'); convert(model, return_model=False)"
    loud = project(tmp_path / "saves", {"train.py": script_text(body.format(saving=saving)), "helpers.py": _SAVER})
    saves = [f for f in check_file(loud) if f.rule == "save-on-every-rank"]
    assert sorted((f.line, f.problem.split("`")[1]) for f in saves) == [(8, "checkpoint"), (8, "convert")]


def test_a_print_under_an_argument_no_call_passes_is_not_a_print_on_every_rank(tmp_path):
    dataset = """\
        class CarsDataset:
            def __init__(self, annotations, cleaned=None):
                self.annotations = annotations
                if cleaned is not None:
                    print("Cleaning up data set...")
        """
    loaders = """\
        from dataset import CarsDataset

        def get_loader(root):
            return CarsDataset(root{cleaned})
        """
    body = """\
        from dataset import CarsDataset
        from loaders import get_loader
        dist.init_process_group("nccl")
        train = get_loader("cars")
        test = CarsDataset("cars"{cleaned})
        """
    for cleaned, reported in (("", []), (", cleaned='clean.txt'", ["dataset.py:5"])):
        root = tmp_path / str(bool(cleaned))
        script = project(root, {"train.py": script_text(body.format(cleaned=cleaned)),
                                "loaders.py": loaders.format(cleaned=cleaned), "dataset.py": dataset})
        found = [f.problem.split(" (")[1].split(",")[0] for f in check_file(script) if f.rule == "print-on-every-rank"]
        assert found == reported, (cleaned, found)


def test_a_launch_line_for_another_script_or_offered_after_torchrun_is_not_this_files(tmp_path):
    helper = """\
        import os
        import torch.distributed as dist

        def init_distributed_mode(args):
            # launch by torch.distributed.launch
            #   python -m torch.distributed.launch --nproc_per_node=8 {started} --world-size 1
            dist.init_process_group("nccl")
        """
    for started, reported in (("main.py", []), ("misc.py", [6])):
        script = project(tmp_path / started, {"misc.py": helper.format(started=started)})
        assert [f.line for f in check_file(script) if f.rule == "deprecated-launcher"] == reported
    offered = script_text("""\
        # torchrun --standalone --nproc_per_node=4 train.py OR python -m torch.distributed.launch --nproc_per_node=4 train.py
        dist.init_process_group("nccl")
        """)
    assert [f for f in check_file(project(tmp_path / "offered", {"train.py": offered})) if f.rule == "deprecated-launcher"] == []


def test_a_flag_named_as_the_saving_method_is_no_call_of_it():
    source = """\
import torch
import torch.distributed as dist

class Trainer:
    def __init__(self, model, params):
        self.model, self.params = model, params

    def train(self):
        if dist.get_rank() == 0:
            if self.params.save_checkpoint:
                self.save_checkpoint("ckpt.tar")

    def save_checkpoint(self, path):
        torch.save({"model": self.model.state_dict()}, path)

dist.init_process_group("nccl")
"""
    assert rules(source) == []
    handed_on = source.replace("            if self.params.save_checkpoint:\n",
                               "            if callbacks.append(self.save_checkpoint):\n")
    assert rules(handed_on) == [(14, "save-on-every-rank")]


def test_a_test_of_what_an_object_given_the_rank_made_runs_on_every_rank():
    source = """\
import os
import torch.distributed as dist
from trainer import Trainer

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
if local_rank == 0:
    model = Trainer(logger=print, local_rank=local_rank)
else:
    model = Trainer(local_rank=local_rank)
weights = None
for stage in range(2):
    if weights is not None:
        print("loading the network of the previous stage")
    weights = model.network.state_dict()
"""
    assert rules(source) == [(14, "print-on-every-rank")]


def test_a_sampler_passed_on_one_side_of_a_choice_or_through_a_container_is_passed():
    source = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("nccl")
def get_data_loader(dataset, train):
    sampler = DistributedSampler(dataset, shuffle=train)
    return DataLoader(dataset, sampler=sampler if train else None)

valid_samplers = {}
for head in ("a", "b"):
    valid_sampler = DistributedSampler(range(8), shuffle=False, drop_last=True)
    valid_samplers[head] = valid_sampler
loaders = {head: DataLoader(range(8), sampler=valid_samplers[head]) for head in ("a", "b")}
test_sampler = DistributedSampler(range(8), shuffle=False, drop_last=True)
"""
    assert [line for line, rule in rules(source) if rule == "sampler-not-passed"] == [14]


def test_a_project_logger_that_filters_records_by_rank_is_rank_aware(tmp_path):
    tools = """\
        import logging
        import sys

        def setup_logger(level=logging.INFO, rank=0):
            logger = logging.getLogger()
            logger.setLevel(logging.DEBUG)
            {filter}
            handler = logging.StreamHandler(stream=sys.stdout)
            handler.setLevel(level)
            logger.addHandler(handler)
        """
    body = """\
        import logging
        from tools import setup_logger
        dist.init_process_group("nccl")
        setup_logger(level=logging.INFO, rank=dist.get_rank())
        logging.info("training starts")
        """
    for name, line, found in (("filtered", "logger.addFilter(lambda _: rank == 0)", []), ("every", "", [7])):
        script = project(tmp_path / name, {"train.py": script_text(body), "tools.py": tools.format(filter=line)})
        assert [f.line for f in check_file(script) if f.rule == "log-on-every-rank"] == found, name


def test_a_save_once_per_machine_in_a_script_that_meets_on_localhost_runs_once():
    source = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def main_worker(local_rank, world_size, url):
    rank = int(os.environ.get("NODE_RANK", 0)) * 4 + local_rank
    dist.init_process_group("nccl", init_method=url, rank=rank, world_size=world_size)
    model = torch.nn.Linear(2, 2)
    if local_rank == 0:
        torch.save(model.state_dict(), "model.pth")

if __name__ == "__main__":
    port = 29500
    url = {url}
    mp.spawn(main_worker, nprocs=4, args=(4, url))
"""
    assert rules(source.format(url='f"tcp://127.0.0.1:{port}"')) == []
    from_environment = "f'tcp://{os.environ[\"MASTER_ADDR\"]}:{port}'"
    assert rules(source.format(url=from_environment)) == [(11, "save-on-every-rank")]
