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
    # two saves of one block: one finding, at the first
    assert [(f.line, f.problem.split("`")[1]) for f in saves] == [(8, "checkpoint")]


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


def test_a_name_given_only_the_global_rank_tests_the_global_rank_whatever_it_is_called():
    source = """\
import torch
import torch.distributed as dist

class Trainer:
    def __init__(self, model):
        local_rank = {rank}
        self.local_rank = local_rank
        self.model = model

    def save_weights(self, path):
        if self.local_rank != 0:
            return
        torch.save(self.model.state_dict(), path)

dist.init_process_group("nccl")
Trainer(torch.nn.Linear(2, 2)).save_weights("last.pth")
"""
    for rank in ("torch.distributed.get_rank()", "int(os.environ['RANK'])"):
        assert rules(source.format(rank=rank)) == [], rank
    # a machine's rank by its name and its value: the first process of every machine writes
    assert rules(source.format(rank="int(os.environ['LOCAL_RANK'])")) == [(13, "save-on-every-rank")]


def test_the_parent_that_starts_processes_of_an_imported_function_runs_its_main_block_once(tmp_path):
    utils = """\
        import os
        import torch
        import torch.distributed as dist

        def init_processes(rank, size, fn, args):
            torch.cuda.set_device(args.local_rank)
            dist.init_process_group(backend="nccl", init_method="env://", rank=rank, world_size=size)
            fn(args)
        """
    body = """\
        import argparse
        from torch.multiprocessing import Process
        from util import utils

        def main(args):
            torch.save(args.local_rank, "state.pt")

        if __name__ == "__main__":
            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=0)
            parser.add_argument("--num_process_per_node", type=int, default=1)
            args = parser.parse_args()
            print("experiment directory made")
            processes = []
            for rank in range(args.num_process_per_node):
                args.local_rank = rank
                p = Process(target={target}, args=(rank, args.num_process_per_node, main, args))
                p.start()
                processes.append(p)
        """
    imported = project(tmp_path / "imported", {"train.py": script_text(body.replace("{target}", "utils.init_processes")),
                                               "util/__init__.py": "", "util/utils.py": utils})
    found = rules_of(imported)
    # the worker's save is reported; the parent's print and the flag it overwrites per worker are not
    assert [rule for _, rule in found] == ["save-on-every-rank"]
    # a starter whose target is unknown (not this file's, not an imported module's): nothing is known of the parent
    unknown = project(tmp_path / "unknown", {"train.py": script_text(body.replace("{target}", "starters[0]")),
                                             "util/__init__.py": "", "util/utils.py": utils})
    assert "print-on-every-rank" in [rule for _, rule in rules_of(unknown)]


def rules_of(script) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_file(script)]


def test_a_module_function_no_other_file_of_the_project_uses_never_runs(tmp_path):
    utils = """\
        import torch
        import torch.distributed as dist

        def init_processes(rank, size, fn, args):
            dist.init_process_group("nccl", rank=rank, world_size=size)
            fn(args)

        def save_checkpoint(state, is_best, save):
            torch.save(state, save + "/checkpoint.pth.tar")

        def save(model, model_path):
            torch.save(model.state_dict(), model_path)
        """
    body = """\
        from util import utils
        utils.init_processes(0, 1, print, None)
        """
    dead = project(tmp_path / "dead", {"util/utils.py": utils, "train.py": script_text(body), "util/__init__.py": ""})
    assert rules_of(dead) == []
    # another file calling the module's function through the module (or an alias of it) makes it run
    for name, call in (("module", "utils.save(model, 'm.pt')"), ("alias", "U.save(model, 'm.pt')")):
        used = body.replace("from util import utils", "from util import utils\nimport util.utils as U") + call + "\n"
        live = project(tmp_path / name, {"util/utils.py": utils, "train.py": script_text(used), "util/__init__.py": ""})
        assert rules_of(live) == [(12, "save-on-every-rank")], name


def test_a_logger_class_of_the_project_with_a_console_handler_at_info_logs_on_every_rank(tmp_path):
    utils = """\
        import logging

        class Logger():
            def __init__(self, path="log.txt"):
                self.logger = logging.getLogger("demo")
                self.stdout_handler = logging.StreamHandler()
                self.logger.addHandler(self.stdout_handler)
                {level}

            def info(self, txt):
                self.logger.info(txt)
        """
    body = """\
        from utils import Logger
        dist.init_process_group("nccl")
        logger = Logger("log.txt")
        logger.info("training starts")
        """
    for name, level, found in (("info", "self.logger.setLevel(logging.INFO)", [6]),
                               ("by-rank", "self.logger.setLevel(logging.INFO if dist.get_rank() == 0 else logging.WARN)", []),
                               ("warning", "self.logger.setLevel(logging.WARNING)", [])):
        script = project(tmp_path / name, {"train.py": script_text(body), "utils.py": utils.format(level=level)})
        assert [f.line for f in check_file(script) if f.rule == "log-on-every-rank"] == found, name


def test_a_script_its_readme_starts_with_the_deprecated_launcher_is_reported_at_its_local_rank_flag(tmp_path):
    body = """\
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--local-rank", type=int, default=0)
        parser.add_argument("--local_rank", type=int, default=0)
        args = parser.parse_args()
        dist.init_process_group("nccl")
        """
    readme = "## Train\n\n```\npython -m torch.distributed.launch --nproc_per_node=1 {script} --epochs 5\n```\n"
    old = project(tmp_path / "old", {"train.py": script_text(body), "README.md": readme.format(script="train.py")})
    [finding] = [f for f in check_file(old) if f.rule == "deprecated-launcher"]
    assert finding.line == 6 and "README.md:4" in finding.problem  # the `--local_rank` spelling, the README's line
    for name, readme_text in (("torchrun", readme.replace("python -m torch.distributed.launch", "torchrun")),
                              ("other", readme.format(script="eval.py"))):
        files = {"train.py": script_text(body), "eval.py": "print(1)\n", "README.md": readme_text.format(script="train.py")
                 if name == "torchrun" else readme_text}
        assert [f for f in check_file(project(tmp_path / name, files)) if f.rule == "deprecated-launcher"] == [], name


def test_prints_before_the_files_own_print_silencing_call_run_on_every_rank():
    source = """\
import builtins
import torch.distributed as dist

def setup_for_distributed(is_master):
    builtin_print = builtins.print
    def print(*args, **kwargs):
        if is_master or kwargs.pop("force", False):
            builtin_print(*args, **kwargs)
    builtins.print = print

def init_distributed_mode(args):
    if "WORLD_SIZE" not in os.environ:
        print("Not using distributed mode")
        return
    dist.init_process_group("nccl")
    print("Before torch.distributed.barrier()")
    dist.barrier()
    setup_for_distributed(dist.get_rank() == 0)
    print("after")
"""
    assert rules(source) == [(16, "print-on-every-rank")]
    assert rules(source.replace('    print("Before torch.distributed.barrier()")\n', "")) == []


def test_hugging_face_and_safetensors_writes_count_as_saves_and_one_block_of_them_is_one_finding():
    source = """\
import torch.distributed as dist
from safetensors.torch import save_file

dist.init_process_group("nccl")
model, tokenizer = build()
train(model)
tokenizer.save_pretrained(out)
model.config.save_pretrained(out)
model.save_pretrained(out)
save_file(model.state_dict(), out + "/model.safetensors")
if dist.get_rank() == 0:
    model.save_pretrained(final)
model.save_pretrained(final, is_main_process=dist.get_rank() == 0)
"""
    findings = check_source(source)
    assert [(f.line, f.rule) for f in findings] == [(7, "save-on-every-rank")]
    assert "tokenizer.save_pretrained" in findings[0].problem and "(also lines 8, 9, 10)" in findings[0].problem


def test_saves_under_other_rank_zero_decorators_run_on_rank_zero_only():
    source = """\
import torch
import torch.distributed as dist
from utils import {decorator}

@{decorator}
def save_checkpoint(model, path):
    torch.save(model.state_dict(), path)

dist.init_process_group("nccl")
save_checkpoint(torch.nn.Linear(2, 2), "ckpt.pth")
"""
    for decorator in ("rank0_only", "master_only", "main_process_only"):
        assert rules(source.format(decorator=decorator)) == [], decorator
    assert rules(source.format(decorator="timed")) == [(7, "save-on-every-rank")]


def test_prints_and_saves_no_run_reaches_are_not_reported():
    source = """\
import torch
import torch.distributed as dist

def print_memory_stats(message=""):
    return  # FIXME
    print("memory", message)

def debug_dump(model):
    if False:
        torch.save(model.state_dict(), "debug.pth")

dist.init_process_group("nccl")
print_memory_stats("start")
debug_dump(torch.nn.Linear(2, 2))
{live}
"""
    assert rules(source.format(live="")) == []
    assert rules(source.format(live='print("live")')) == [(15, "print-on-every-rank")]


def test_a_tokenizer_or_config_loaded_before_the_seed_is_no_model_built_before_it():
    source = """\
import torch
import torch.distributed as dist
from transformers import AutoTokenizer, AutoModelForSequenceClassification

dist.init_process_group("nccl")
tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
{model}
torch.manual_seed(0)
"""
    assert [r for r in rules(source.format(model="")) if r[1] == "model-before-seed"] == []
    model = 'model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")'
    assert [r for r in rules(source.format(model=model)) if r[1] == "model-before-seed"] == [(7, "model-before-seed")]


def test_a_sampler_a_function_returns_is_its_callers_to_pass():
    source = """\
from torch.utils.data import DistributedSampler

def create_sampler(dataset, shuffle, cfg):
    sampler = DistributedSampler(dataset) if cfg.NUM_GPUS > 1 else None
    return sampler

def unused(dataset):
    train_sampler = DistributedSampler(dataset)
    return len(dataset)
"""
    assert [r for r in rules(source) if r[1] == "sampler-not-passed"] == [(8, "sampler-not-passed")]


def test_set_epoch_through_a_local_name_for_the_sampler_is_set_epoch():
    source = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

class Trainer:
    def __init__(self, dataset):
        self.train_sampler = DistributedSampler(dataset)
        self.train_loader = DataLoader(dataset, sampler=self.train_sampler)

    def train(self):
        train_sampler = self.train_sampler
        for epoch in range(3):
            {call}
            for batch in self.train_loader:
                pass

dist.init_process_group("nccl")
"""
    assert [r for r in rules(source.format(call="train_sampler.set_epoch(epoch)")) if r[1] == "no-set-epoch"] == []
    assert [r for r in rules(source.format(call="pass")) if r[1] == "no-set-epoch"] == [(6, "no-set-epoch")]


def test_the_save_of_a_trainer_subclass_runs_where_the_trainer_saves():
    source = """\
import torch
import torch.distributed as dist
from transformers import Trainer

class SupervisedTrainer(Trainer):
    def {method}(self, output_dir=None, state_dict=None):
        torch.save(self.args, output_dir + "/training_args.bin")

dist.init_process_group("nccl")
SupervisedTrainer(model=None).train()
"""
    assert rules(source.format(method="_save")) == []
    assert rules(source.format(method="on_epoch_end")) == [(7, "save-on-every-rank")]
    # called directly, on every rank, it writes on every rank
    direct = source.format(method="_save") + "SupervisedTrainer(model=None)._save('out')\n"
    assert rules(direct) == [(7, "save-on-every-rank")]


def test_a_loader_accelerate_prepared_and_threw_away_leaves_every_rank_on_the_whole_dataset():
    source = """\
from copy import deepcopy
from accelerate import Accelerator
from torch.utils.data import DataLoader

accelerator = Accelerator()
train_dataloader = DataLoader(dataset, batch_size=8, shuffle=True)
model, optimizer, {kept}, scheduler = accelerator.prepare(
    model, optimizer, deepcopy(train_dataloader), scheduler
)
for epoch in range(3):
    for step, batch in enumerate(train_dataloader):
        optimizer.step()
"""
    assert [r for r in rules(source.format(kept="_")) if r[1] == "sampler-not-passed"] == [(8, "sampler-not-passed")]
    assert [r for r in rules(source.format(kept="train_dataloader")) if r[1] == "sampler-not-passed"] == []


def test_a_rank_a_method_returns_is_the_rank_it_returns():
    source = """\
import torch
import torch.distributed as dist

class Trainer:
    def __init__(self, model):
        self.model = model
        self.lrank = self._build_distribute()

    def _build_distribute(self):
        dist.init_process_group(backend="nccl")
        local_rank = {rank}
        torch.cuda.set_device(local_rank)
        return local_rank

    def fit(self):
        if self.lrank == 0:
            torch.save(self.model.state_dict(), "model.pth")
"""
    assert rules(source.format(rank="dist.get_rank()")) == []
    assert rules(source.format(rank="int(os.environ['LOCAL_RANK'])")) == [(17, "save-on-every-rank")]


def test_a_name_for_an_imported_worker_handed_to_spawn_is_a_launch():
    source = """\
import torch.multiprocessing as mp
from train import train, pretrain

if __name__ == "__main__":
    main = pretrain if mode == "pretrain" else train
    print("using mp spawn for distributed training")
    mp.spawn({target}, nprocs=4)
"""
    assert [r for r in rules(source.format(target="main")) if r[1] == "print-on-every-rank"] == []
    assert [r for r in rules(source.format(target="workers[0]")) if r[1] == "print-on-every-rank"] == [
        (6, "print-on-every-rank")]


def test_a_print_naming_a_rank_kept_under_a_key_is_rank_tagged():
    source = """\
import torch.distributed as dist

def main_worker(config):
    dist.init_process_group("nccl", rank=config["global_rank"], world_size=config["world_size"])
    print("using GPU {}-{} for training".format(int(config["{key}"]), 0))
"""
    assert rules(source.replace("{key}", "global_rank")) == []
    assert rules(source.replace("{key}", "world_size")) == [(5, "print-on-every-rank")]


def test_a_project_helper_named_local_that_returns_the_global_rank_tests_the_global_rank(tmp_path):
    comm = """\
        import torch.distributed as dist

        def get_local_rank():
            if not dist.is_initialized():
                return 0
            return {rank}
        """
    trainer = """\
        import torch
        import torch.distributed as dist
        import comm

        def save_state(model, path):
            dist.barrier()
            if comm.get_local_rank() == 0:
                torch.save(model.state_dict(), path)
        """
    for name, rank, found in (("global", "dist.get_rank()", []), ("local", "int(os.environ['LOCAL_RANK'])", [8])):
        script = project(tmp_path / name, {"trainer.py": trainer, "comm.py": comm.format(rank=rank)})
        assert [f.line for f in check_file(script) if f.rule == "save-on-every-rank"] == found, name


def test_a_distributed_flag_kept_under_a_key_tells_the_one_process_run():
    source = """\
import torch.distributed as dist

def main_worker(config):
    dist.init_process_group("nccl", rank=config["global_rank"], world_size=config["world_size"])
    if {test}:
        print("[**] create folder", config["save_dir"])
"""
    assert rules(source.format(test="(not config['distributed']) or config['global_rank'] == 0")) == []
    assert rules(source.format(test="config['distributed'] or config['global_rank'] == 0")) == [
        (6, "print-on-every-rank")]


def test_a_project_saver_is_read_with_the_scripts_own_idea_of_a_checkpoint_write(tmp_path):
    # the helper saves with save_pretrained / safetensors (the script-level rule counts both), or with torch.save
    # after a return (never runs)
    helpers = {
        "pretrained": "def save_all(model, out):\n    model.save_pretrained(out)\n",
        "safetensors": "from safetensors.torch import save_file\n\ndef save_all(model, out):\n"
                       "    save_file(model.state_dict(), out)\n",
        "dead": "import torch\n\ndef save_all(model, out):\n    return None\n    torch.save(model.state_dict(), out)\n",
        "rank-aware": "def save_all(model, out):\n    model.save_pretrained(out, is_main_process=False)\n",
    }
    body = """\
        from helpers import save_all
        dist.init_process_group("nccl")
        model = torch.nn.Linear(2, 2)
        save_all(model, "out")
        """
    found = {}
    for kind, text in helpers.items():
        script = project(tmp_path / kind, {"train.py": script_text(body), "helpers.py": text})
        found[kind] = [f.line for f in check_file(script) if f.rule == "save-on-every-rank"]
    assert found == {"pretrained": [6], "safetensors": [6], "dead": [], "rank-aware": []}


TRAINER_WITH_ITS_OWN_SAVE_PRETRAINED = """\
from accelerate import Accelerator


class Trainer:
    def __init__(self, model):
        self.accelerator = Accelerator()
        self.model = self.accelerator.prepare(model)

    def save_pretrained(self, directory):
        self.accelerator.wait_for_everyone()
        self.accelerator.unwrap_model(self.model).save_pretrained(
            directory, save_function=self.accelerator.save, is_main_process=self.accelerator.is_main_process)

    def learn(self, steps):
        for step in range(steps):
            if step % 100 == 0:
                self.save_pretrained(f"checkpoint_{step}")
"""


def test_a_trainers_own_save_pretrained_is_its_code_not_hugging_faces():
    # trlx's trainer: its `self.save_pretrained` hands is_main_process on to the model's; no save on every rank
    assert [rule for _, rule in rules(TRAINER_WITH_ITS_OWN_SAVE_PRETRAINED)] == []
    # the model's own save_pretrained, not told which process is the main one, still is
    plain = TRAINER_WITH_ITS_OWN_SAVE_PRETRAINED.replace(
        "self.save_pretrained(f\"checkpoint_{step}\")", "self.model.save_pretrained(f\"checkpoint_{step}\")")
    assert (17, "save-on-every-rank") in rules(plain)


PORT_FROM_THE_CLOCK = """\
import argparse
import os
import time

import torch.distributed as dist


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def setup_ddp(rank, world_size, seed):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(seed)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def initialize_environment_ddp(rank, world_size, seed=0):
    seed = (seed + int(time.time())) % 55535 + 10000
    setup_ddp(rank, world_size, seed)
"""


def test_a_port_named_seed_computed_from_the_clock_is_not_the_seed_options_default():
    # Music-Source-Separation-Training: the `--seed` option and setup_ddp's `seed` share a name only
    assert "hardcoded-rendezvous" not in [rule for _, rule in rules(PORT_FROM_THE_CLOCK)]
    # an option named for the port, handed on by name, still reaches MASTER_PORT with its fixed default
    port = PORT_FROM_THE_CLOCK.replace('"--seed", type=int, default=0', '"--master_port", type=int, default=12355')
    port = port.replace("str(seed)", "str(master_port)").replace("world_size, seed)", "world_size, master_port)")
    assert (10, "hardcoded-rendezvous") in rules(port)


DATASET_THAT_CHOOSES_WHO_WARNS = """\
import torch.distributed as dist


class Tracks:
    def __init__(self, folders):
        should_print = not dist.is_initialized() or dist.get_rank() == 0
        self.tracks = []
        for folder in folders:
            if len(folder) == 0 and should_print:
                print("Warning: no tracks found in", folder)
            self.tracks.append(folder)
"""

TRAIN_BUILDING_IT = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from dataset import Tracks

dist.init_process_group("nccl")
data = Tracks(["a", ""])
model = DDP(torch.nn.Linear(2, 2))
"""


def test_a_project_print_under_an_and_with_a_stored_rank_test_is_rank_zeros(tmp_path):
    # Music-Source-Separation-Training's datasets: `if len(found) == 0 and should_print:`
    script = project(tmp_path / "chosen", {"train.py": TRAIN_BUILDING_IT, "dataset.py": DATASET_THAT_CHOOSES_WHO_WARNS})
    assert "print-on-every-rank" not in [f.rule for f in check_file(script)]
    every = DATASET_THAT_CHOOSES_WHO_WARNS.replace("len(folder) == 0 and should_print", "len(folder) == 0")
    script = project(tmp_path / "every", {"train.py": TRAIN_BUILDING_IT, "dataset.py": every})
    assert (7, "print-on-every-rank") in [(f.line, f.rule) for f in check_file(script)]


def test_an_unseeded_shuffle_at_the_end_of_a_dataset_chain_differs_per_rank():
    source = """\
import torch.distributed as dist
from datasets import load_dataset
from transformers import Trainer

def make_train_dataset(path, tokenize):
    dataset = load_dataset("json", data_files=path)["train"]
    dataset = dataset.map(tokenize, batched=True, num_proc=8).shuffle()
    return dataset

dist.init_process_group("nccl")
Trainer(model=None, train_dataset=make_train_dataset("train.json", None)).train()
"""
    assert rules(source) == [(7, "unseeded-split")]
    seeded = source.replace(".shuffle()", ".shuffle(seed=42)")
    assert rules(seeded) == []


def test_a_monitored_validation_loss_logged_without_sync_dist_is_one_shards():
    source = """\
import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

class Classifier(pl.LightningModule):
    def validation_step(self, batch, batch_idx):
        loss, acc = self.shared_step(batch)
        self.log("val_loss", loss)
        self.log("val_acc", acc)

    def test_step(self, batch, batch_idx):
        self.log("test_acc", self.accuracy)

def main(devices):
    checkpoint = ModelCheckpoint(monitor="val_loss", mode="min")
    pl.Trainer(devices=devices, callbacks=[checkpoint]).fit(Classifier())
"""
    found = check_source(source)
    assert [(f.line, f.rule) for f in found] == [(7, "ungathered-metric")]
    assert found[0].problem.endswith("(also lines 8)")  # test_step logs a metric object, which syncs itself
    synced = source.replace('self.log("val_loss", loss)', 'self.log("val_loss", loss, sync_dist=True)')
    assert rules(synced) == []  # val_acc is still each shard's, but nothing chooses by it
    assert rules(source.replace('monitor="val_loss"', 'monitor="val_acc"')) == [(8, "ungathered-metric")]
    one_device = source.replace("devices=devices", "devices=1")
    assert rules(one_device) == []
    gathered = source.replace("        self.log(\"val_loss\", loss)\n",
                              "        self.log(\"val_loss\", self.all_gather(loss).mean())\n")
    assert rules(gathered) == []
    by_a_helper = source.replace("        self.log(\"val_loss\", loss)\n",  # ngp_pl's helper of its own
                                 "        self.log(\"val_loss\", all_gather_ddp_if_available(loss).mean())\n")
    assert rules(by_a_helper) == []


def test_a_question_about_the_ranks_device_is_not_a_rank_test():
    source = """\
import logging
import torch
import torch.multiprocessing as mp

logger = logging.getLogger(__package__)

def worker(rank, world_size):
    torch.distributed.init_process_group("nccl", rank=rank, world_size=world_size)
    logging.basicConfig(level=logging.INFO)
    logger.info("gpu_mem: {}".format(torch.cuda.get_device_properties(rank).total_memory))
    if torch.cuda.get_device_properties(rank).total_memory / 1e9 > 14:
        logger.info("setting batch size according to 24G gpu")
    if rank == 0:
        logger.info("only here")
    logger.info("rank {} ready".format(rank))

if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
"""
    found = check_source(source)
    assert [(f.line, f.rule) for f in found] == [(10, "log-on-every-rank")]
    assert found[0].problem.endswith("(also lines 12)")  # not 14 (rank 0's) nor 15 (it names its rank)


def test_a_copy_of_the_wrappers_state_dict_saved_later_keeps_its_prefix():
    source = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
model = DDP(torch.nn.Linear(2, 2))
if dist.get_rank() == 0:
    best_model = model.state_dict().copy()
    torch.save(best_model, "best.pth")
"""
    assert rules(source) == [(8, "wrapped-state-dict")]
    assert rules(source.replace("model.state_dict().copy()", "copy.deepcopy(model.state_dict())")) == [
        (8, "wrapped-state-dict")]
    assert rules(source.replace("model.state_dict().copy()", "model.module.state_dict().copy()")) == []


def test_a_validation_total_compared_with_the_best_is_one_shards():
    source = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def train(model, valid_set, epochs):
    valid_sampler = DistributedSampler(valid_set)
    valid_loader = DataLoader(valid_set, batch_size=8, sampler=valid_sampler)
    best_val_loss = float("inf")
    for epoch in range(epochs):
        valid_rec_loss = 0.0
        for batch in valid_loader:
            valid_rec_loss += model(batch).item()
        if dist.get_rank() == 0:
            if valid_rec_loss < best_val_loss:
                best_val_loss = valid_rec_loss
                torch.save(model.module.state_dict(), "best.pth")
"""
    found = [(f.line, f.rule) for f in check_source(source)]
    assert (15, "ungathered-metric") in found
    reduced = source.replace("        if dist.get_rank() == 0:\n",
                             "        dist.all_reduce(torch.tensor(valid_rec_loss))\n        if dist.get_rank() == 0:\n")
    assert not [rule for _, rule in rules(reduced) if rule == "ungathered-metric"]


def test_stdout_sent_to_devnull_in_two_steps_silences_the_other_ranks():
    source = """\
import os
import sys
import torch.distributed as dist

def train(local_rank):
    if local_rank != 0:
        f = open(os.devnull, "w")
        sys.stdout = sys.stderr = f
    dist.init_process_group("nccl")
    print("-" * 10)
"""
    assert rules(source) == []
    assert rules(source.replace("sys.stdout = sys.stderr = f", "log_file = f")) == [(10, "print-on-every-rank")]


def test_a_print_into_a_file_is_no_console_line():
    source = """\
import json
import torch.distributed as dist

dist.init_process_group("nccl")
with open("experiment.log", "w") as f:
    print(json.dumps({"lr": 0.1}), file=f)
print("to the console", file=sys.stderr)
"""
    assert rules(source) == [(7, "print-on-every-rank")]


def test_a_debug_line_makes_no_record_at_info():
    source = """\
import logging
import torch.distributed as dist

logging.basicConfig(level=logging.INFO)
dist.init_process_group("nccl")
logging.debug("%d files", 3)
logging.info("project root")
"""
    assert rules(source) == [(7, "log-on-every-rank")]
    assert rules(source.replace("level=logging.INFO", "level=logging.DEBUG")) == [(6, "log-on-every-rank")]


def test_a_method_that_another_file_calls_on_an_instance_under_a_rank_test_saves_once(tmp_path):
    """PyTorch-StudioGAN (28th corpus): ``WORKER.save`` and the ``misc.save_model`` it calls hold bare
    ``torch.save`` calls; ``loader.py`` makes ``worker = WORKER(...)`` and calls ``worker.save(...)`` only under
    ``if global_rank == 0:``. Both saves run on rank 0 alone; the same call without the test saves on every rank."""
    files = {
        "worker.py": """\
            import torch
            import torch.distributed as dist
            import misc

            class WORKER:
                def __init__(self, model):
                    self.model = model
                    self.group = dist.new_group(list(range(dist.get_world_size())))

                def save(self, step):
                    torch.save({"step": step}, "state.pth")
                    misc.save_model(self.model, "model.pth")
            """,
        "misc.py": """\
            import torch
            import torch.distributed as dist

            def save_model(model, path):
                torch.save(model.state_dict(), path)
                dist.barrier()
            """,
        "loader.py": script_text("""\
            from worker import WORKER
            dist.init_process_group("nccl")
            global_rank = dist.get_rank()
            worker = WORKER(torch.nn.Linear(2, 2))
            for step in range(3):
                if global_rank == 0:
                    worker.save(step=step)
            """),
    }
    guarded = project(tmp_path / "guarded", files)
    saves = lambda root: sorted((name, f.line) for name in ("worker.py", "misc.py")  # noqa: E731
                                for f in check_file(root / name) if f.rule == "save-on-every-rank")
    assert saves(guarded.parent) == []
    files["loader.py"] = files["loader.py"].replace("if global_rank == 0:", "if step >= 0:")
    every_rank = project(tmp_path / "every", files)
    assert saves(every_rank.parent) == [("misc.py", 5), ("worker.py", 11)]


def test_a_print_the_file_rebinds_to_its_own_writer_is_not_quieted_by_the_projects_replacement():
    """UniTS (28th corpus): ``exp_pretrain.py`` binds ``print = custom_print_decorator(print)`` when imported; the
    wrapper writes to ``sys.stdout`` itself, so ``setup_for_distributed``'s later replacement of builtins.print,
    which quiets every other file's prints, never reaches this one's."""
    source = """\
import sys
import torch.distributed as dist
from utils.ddp import init_distributed_mode

def custom_print_decorator(func):
    def wrapper(*args, **kwargs):
        sys.stdout.write(' '.join(map(str, args)) + '\\n')
    return wrapper

print = custom_print_decorator(print)

def train(args):
    init_distributed_mode(args)
    for epoch in range(3):
        print("epoch", epoch)
        dist.barrier()

if __name__ == "__main__":
    train(None)
"""
    assert rules(source) == [(15, "print-on-every-rank")]
    plain = source.replace("print = custom_print_decorator(print)\n", "")
    assert rules(plain) == []  # the project's replacement quiets it


def test_a_flag_switched_off_on_every_gpu_but_the_first_is_a_rank_test():
    """P5 (28th corpus): ``self.verbose = True``, then ``if self.args.gpu != 0: self.verbose = False``; its prints
    sit under ``if self.verbose:``, which holds on the first GPU (of each machine) only."""
    source = """\
import torch
import torch.distributed as dist

class TrainerBase:
    def __init__(self, args):
        self.args = args
        self.verbose = True
        if self.args.distributed:
            if self.args.gpu != 0:
                self.verbose = False

    def create_optimizer(self):
        if self.verbose:
            print('Building Optimizer')
        dist.barrier()

if __name__ == "__main__":
    dist.init_process_group("nccl")
    TrainerBase(None).create_optimizer()
"""
    assert rules(source) == []
    assert rules(source.replace("if self.args.gpu != 0:", "if self.args.gpu >= 0:")) == [(14, "print-on-every-rank")]


def test_a_parameter_every_call_fills_with_a_rank_test_guards_what_it_tests():
    """THUMT (28th corpus): ``print_variables(model, pattern, log=dist.get_rank() == 0)``, whose prints sit under
    ``if log:``. A call passing ``log=True`` (or leaving the default ``True``) prints on every rank."""
    source = """\
import torch
import torch.distributed as dist

def print_variables(model, pattern, log=True):
    for name, _ in model.named_parameters():
        if log:
            print(name)

def main():
    dist.init_process_group("nccl")
    model = torch.nn.Linear(2, 2)
    print_variables(model, "w", log=dist.get_rank() == 0)

if __name__ == "__main__":
    main()
"""
    assert rules(source) == []
    assert rules(source.replace('log=dist.get_rank() == 0', 'log=True')) == [(7, "print-on-every-rank")]
    assert rules(source.replace(', log=dist.get_rank() == 0', '')) == [(7, "print-on-every-rank")]


def test_a_branch_for_a_job_of_one_process_runs_once():
    """PyTorch-StudioGAN (28th corpus): ``if cfgs.OPTIMIZATION.world_size == 1: print(...)``."""
    source = """\
import torch.distributed as dist

def load_configs(cfgs):
    if cfgs.OPTIMIZATION.world_size == 1:
        print("You have chosen a specific GPU. This will completely disable data parallelism.")
    if cfgs.OPTIMIZATION.world_size == 2:
        print("two")
    dist.init_process_group("nccl")

if __name__ == "__main__":
    load_configs(None)
"""
    assert rules(source) == [(7, "print-on-every-rank")]


def test_a_sampler_chosen_by_a_conditional_expression_inside_the_loader_call_needs_set_epoch():
    """``DataLoader(ds, sampler=DistributedSampler(ds) if ddp else None)``, returned to a caller, in a project where
    nothing calls ``set_epoch``: each epoch repeats the first one's order."""
    source = """\
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def data_provider(data_set, ddp, shuffle_flag):
    data_loader = DataLoader(
        data_set,
        batch_size=32,
        shuffle=False if ddp else shuffle_flag,
        sampler=DistributedSampler(data_set) if ddp else None,
    )
    return data_set, data_loader

dist.init_process_group("nccl")
"""
    assert rules(source) == [(10, "no-set-epoch")]
    told = source + "_, loader = data_provider(None, True, True)\nfor epoch in range(3):\n    loader.sampler.set_epoch(epoch)\n"
    assert rules(told) == []


def test_a_loader_class_given_as_a_parameter_that_defaults_to_dataloader_is_a_loader():
    """``def loader(dataset, *args, klass=DataLoader, **kwargs): sampler = DistributedSampler(dataset); return
    klass(dataset, sampler=sampler)``: the sampler goes to a DataLoader, which never sets its epoch."""
    source = """\
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def loader(dataset, *args, shuffle=False, klass=DataLoader, **kwargs):
    if shuffle:
        sampler = DistributedSampler(dataset)
        return klass(dataset, *args, **kwargs, sampler=sampler)
    return klass(dataset, *args, shuffle=shuffle)

dist.init_process_group("nccl")
"""
    assert rules(source) == [(7, "no-set-epoch")]
    handed = source.replace("klass=DataLoader", "klass=make_loader")  # a function of someone else's: it may set it
    assert rules(handed) == []


def test_a_usage_comment_with_the_old_launcher_is_reported_at_the_local_rank_flag_it_needs():
    """The script's own usage comment starts it with ``python -m torch.distributed.launch``: the finding stands on
    the ``--local_rank`` flag (the line to change with the command, as when a README starts it), the comment named
    in its also-lines; a script without the flag keeps it on the comment."""
    source = """\
import argparse
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int)
args = parser.parse_args()
dist.init_process_group("nccl")

# usage: python -m torch.distributed.launch --nproc_per_node=8 train.py
"""
    found = [f for f in check_source(source) if f.rule == "deprecated-launcher"]
    assert [(f.line, "(also lines 9)" in f.problem) for f in found] == [(5, True)]
    no_flag = source.replace('parser.add_argument("--local_rank", type=int)\n', "")
    assert [f.line for f in check_source(no_flag) if f.rule == "deprecated-launcher"] == [8]


def test_a_logging_helper_given_the_level_by_its_caller_logs_on_every_rank_at_that_level(tmp_path):
    """Uni3D: ``setup_logging(log_file, level)`` in another file adds a console handler at the level its caller
    passes; the script passes ``logging.DEBUG if args.debug else logging.INFO`` on every rank."""
    files = {
        "main.py": """\
            import argparse
            import logging
            import torch.distributed as dist
            from utils.logger import setup_logging

            def main(args):
                args.log_level = logging.DEBUG if args.debug else logging.INFO
                setup_logging("out.log", args.log_level)
                dist.init_process_group("nccl")
                logging.info("=> creating model")

            if __name__ == "__main__":
                parser = argparse.ArgumentParser()
                parser.add_argument("--debug", action="store_true")
                main(parser.parse_args())
            """,
        "utils/logger.py": """\
            import logging

            def setup_logging(log_file, level):
                logging.root.setLevel(level)
                handler = logging.StreamHandler()
                logging.root.addHandler(handler)
                logging.root.addHandler(logging.FileHandler(filename=log_file))
            """,
    }
    script = project(tmp_path / "every", files)
    assert [(f.line, f.rule) for f in check_file(script)] == [(10, "log-on-every-rank")]
    quiet = dict(files, **{"main.py": files["main.py"].replace(
        "logging.DEBUG if args.debug else logging.INFO", "logging.INFO if dist.get_rank() == 0 else logging.WARNING")})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "by-rank", quiet))] == []
    warning = dict(files, **{"main.py": files["main.py"].replace(
        "logging.DEBUG if args.debug else logging.INFO", "logging.WARNING")})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "warning", warning))] == []


def test_logging_bound_by_a_star_import_of_a_project_module_is_the_standard_module(tmp_path):
    """Uni3D's main.py never imports ``logging``: it comes with ``from data.datasets import *``, whose own
    ``from .utils.logger import *`` imports it; ``logging.info`` there is the standard module's."""
    files = {
        "main.py": """\
            import torch.distributed as dist
            from data.datasets import *

            if __name__ == "__main__":
                logging.basicConfig(level=logging.INFO)
                dist.init_process_group("nccl")
                logging.info("=> creating model")
            """,
        "data/__init__.py": "",
        "data/datasets.py": "from .helpers import *\n\ndef build(name):\n    return name\n",
        "data/helpers.py": "import logging\n\ndef get_logger(name):\n    return logging.getLogger(name)\n",
    }
    script = project(tmp_path / "star", files)
    assert [(f.line, f.rule) for f in check_file(script)] == [(7, "log-on-every-rank")]
    listed = dict(files, **{"data/helpers.py": "import logging\n__all__ = ['get_logger']\n\n"
                                                "def get_logger(name):\n    return logging.getLogger(name)\n"})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "all", listed))] == []  # not what `*` binds


def test_a_save_under_the_hf_trainers_should_save_runs_on_the_saving_process_only():
    """GraphGPT: ``if trainer.args.should_save: trainer._save(...)`` — the HF Trainer's ``should_save`` is true on the
    process that saves (process 0, unless ``save_on_each_node``)."""
    source = """\
import torch
import torch.distributed as dist
from transformers import Trainer


def safe_save(trainer, path):
    state = trainer.model.state_dict()
    if trainer.args.should_save:
        torch.save(state, path)


dist.init_process_group("nccl")
trainer = Trainer(model=torch.nn.Linear(2, 2))
trainer.train()
safe_save(trainer, "out.bin")
"""
    assert rules(source) == []
    assert rules(source.replace("trainer.args.should_save", "trainer.args.output_dir")) == [(9, "save-on-every-rank")]


def test_a_module_run_after_the_project_quieted_print_prints_on_the_main_rank_only(tmp_path):
    """D-FINE: ``train.py`` calls ``setup_distributed``, whose ``setup_print(is_main)`` replaces builtins.print on
    the other ranks; the solver modules it then runs print in their methods, quieted. Their top-level prints run
    when imported, maybe before: still reported."""
    files = {
        "src/solver.py": """\
            import torch.distributed as dist

            print("solver module imported")

            class Solver:
                def fit(self):
                    dist.barrier()
                    print("Start training")
            """,
        "train.py": """\
            from src import dist_utils
            from src.solver import Solver

            if __name__ == "__main__":
                dist_utils.setup_distributed()
                Solver().fit()
            """,
        "src/__init__.py": "",
        "src/dist_utils.py": """\
            import builtins
            import torch.distributed as dist

            def setup_distributed():
                dist.init_process_group("nccl")
                setup_print(dist.get_rank() == 0)

            def setup_print(is_main):
                builtin_print = builtins.print

                def print(*args, **kwargs):
                    if is_main or kwargs.pop("force", False):
                        builtin_print(*args, **kwargs)

                builtins.print = print
            """,
    }
    [top_level] = check_file(project(tmp_path / "quieted", files))
    assert (top_level.line, top_level.rule) == (3, "print-on-every-rank") and "also lines" not in top_level.problem
    # Stark: the copy of the quieting helper is called by a function that nothing calls: it never runs
    unused = dict(files, **{"train.py": files["train.py"].replace("dist_utils.setup_distributed()", "pass")})
    [both] = check_file(project(tmp_path / "never-called", unused))
    assert (both.line, both.rule) == (3, "print-on-every-rank") and "(also lines 8)" in both.problem


def test_the_caller_that_sets_the_epoch_is_found_beside_the_script_whatever_another_folder_holds(tmp_path):
    """VMamba: ``classification/data/build.py`` returns a DataLoader on a DistributedSampler and
    ``classification/main.py`` calls ``data_loader_train.sampler.set_epoch(epoch)``; ``analyze/`` holds more Python
    files than the project reading lists, and comes first in the tree."""
    files = {
        "classification/data/build.py": """\
            import torch
            import torch.distributed as dist

            def build_loader(dataset):
                sampler = torch.utils.data.DistributedSampler(dataset, num_replicas=dist.get_world_size(), shuffle=True)
                loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=8)
                return dataset, loader
            """,
        "classification/main.py": """\
            from data.build import build_loader

            def main(dataset):
                _, data_loader_train = build_loader(dataset)
                for epoch in range(10):
                    data_loader_train.sampler.set_epoch(epoch)
            """,
        **{f"analyze/vendored/module_{index:04d}.py": "VALUE = 1\n" for index in range(620)},
    }
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "deep", files))] == []
    never = dict(files, **{"classification/main.py": files["classification/main.py"].replace(
        "data_loader_train.sampler.set_epoch(epoch)", "print(epoch)")})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "never", never))] == [(5, "no-set-epoch")]


def test_a_training_sampler_inside_torchs_batch_sampler_still_needs_its_epoch_and_a_test_branchs_does_not():
    """hysts' ``create_dataloader(config, is_train)``: the training DistributedSampler goes to the DataLoader through
    torch's ``BatchSampler`` (which never sets an epoch; nothing in the project does), the test one is made in the
    ``else:`` of ``if is_train:`` for one pass."""
    source = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader


def create_dataloader(config, is_train):
    if is_train:
        train_sampler = torch.utils.data.distributed.DistributedSampler(config.train_set)
        train_batch_sampler = torch.utils.data.sampler.BatchSampler(train_sampler, batch_size=32, drop_last=True)
        return DataLoader(config.train_set, batch_sampler=train_batch_sampler)
    else:
        sampler = torch.utils.data.distributed.DistributedSampler(config.dataset)
        return DataLoader(config.dataset, batch_size=32, sampler=sampler, shuffle=False)


dist.init_process_group("nccl")
"""
    assert rules(source) == [(8, "no-set-epoch")]
    set_by_the_loop = source + """\
loader = create_dataloader(None, True)
for epoch in range(3):
    loader.batch_sampler.sampler.set_epoch(epoch)
"""
    assert rules(set_by_the_loop) == []
    own = source.replace("torch.utils.data.sampler.BatchSampler", "EpochBatchSampler")  # the project's: it may
    assert rules(own) == []
    fresh_each_pass = """\
import torch.distributed as dist
from torch.utils.data import BatchSampler, DistributedSampler

dist.init_process_group("nccl")
for update in range(100):
    indices = list(range(1024))
    dist_sampler = DistributedSampler(indices, shuffle=True, seed=update)
    sampler = BatchSampler(sampler=dist_sampler, batch_size=64, drop_last=False)
    for batch in sampler:
        print(len(batch), flush=True) if dist.get_rank() == 0 else None
"""
    assert rules(fresh_each_pass) == []  # sheeprl's SAC: a new sampler over each gathered batch, read once


def test_a_lightning_module_whose_project_runs_the_trainer_on_several_processes_logs_its_monitored_metric_unsynced(
        tmp_path):
    """pdearena: the LightningModule's file never mentions processes; its docs train with ``--trainer.strategy=ddp
    --trainer.devices=4`` and its YAML's checkpoint callback monitors a value the module logs without sync_dist."""
    files = {
        "pdearena/models/pdemodel.py": """\
            import lightning.pytorch as pl
            import torch

            class PDEModel(pl.LightningModule):
                def validation_step(self, batch, batch_idx):
                    loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
                    self.log("valid/loss", loss)
                    return loss
            """,
        "configs/navierstokes2d.yaml": """\
            trainer:
              callbacks:
                - class_path: lightning.pytorch.callbacks.ModelCheckpoint
                  init_args:
                    monitor: "valid/loss"
            """,
        "docs/train.md": "python scripts/train.py -c configs/navierstokes2d.yaml --trainer.strategy=ddp --trainer.devices=4\n",
    }
    script = project(tmp_path / "ddp", files)
    assert [(f.line, f.rule) for f in check_file(script)] == [(7, "ungathered-metric")]
    one = dict(files, **{"docs/train.md": "python scripts/train.py -c configs/navierstokes2d.yaml --trainer.devices=1\n"})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "one", one))] == []
    # mvsnerf: the backend is ddp only for several GPUs, after the script forced one
    chosen = dict(one, **{"scripts/train.py": "from lightning.pytorch import Trainer\n\nnum_gpus = 1\n"
                                              "trainer = Trainer(distributed_backend='ddp' if num_gpus > 1 else None)\n"})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "chosen", chosen))] == []
    given = dict(one, **{"scripts/train.py": "from lightning.pytorch import Trainer\n\ntrainer = Trainer(strategy='ddp')\n"})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "given", given))] == [(7, "ungathered-metric")]


def test_a_method_of_a_class_that_nothing_names_never_runs(tmp_path):
    """GraphGPT: ``SaveGraphProjectorCallback`` saves in ``on_save_checkpoint``, but no Trainer is given it: no line
    of the file, no other file of the project, no configuration names the class."""
    files = {
        "train.py": """\
            import torch
            import torch.distributed as dist
            from lightning.pytorch.callbacks import Callback

            class SaveProjector(Callback):
                def on_save_checkpoint(self, trainer, pl_module, checkpoint):
                    torch.save(pl_module.state_dict(), "projector.bin")

            if __name__ == "__main__":
                dist.init_process_group("nccl")
            """,
    }
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "unnamed", files))] == []
    configured = dict(files, **{"configs/train.yaml": "callbacks:\n  - _target_: train.SaveProjector\n"})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "configured", configured))] == [
        (7, "save-on-every-rank")]
    named = dict(files, **{"train.py": files["train.py"].replace(  # Paint-by-Example: a target string in the file
        'dist.init_process_group("nccl")', 'dist.init_process_group("nccl")\n                config = {"target": "train.SaveProjector"}')})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "named", named))] == [(7, "save-on-every-rank")]
    given = dict(files, **{"train.py": files["train.py"].replace(
        'dist.init_process_group("nccl")', 'dist.init_process_group("nccl")\n                trainer_callbacks = [SaveProjector()]')})
    assert (7, "save-on-every-rank") in [(f.line, f.rule) for f in check_file(project(tmp_path / "given", given))]


def test_a_lightning_modules_prints_run_on_every_rank_when_its_project_runs_several(tmp_path):
    """StableSR: main.py sets ``trainer_config["accelerator"] = "ddp"`` (Lightning 1.x re-runs the script in every
    process), and the model's ``__init__`` in ``ldm/models/autoencoder.py`` prints its parameter lists."""
    files = {
        "ldm/models/autoencoder.py": """\
            import pytorch_lightning as pl
            import torch

            class AutoencoderKL(pl.LightningModule):
                def __init__(self):
                    super().__init__()
                    self.encoder = torch.nn.Linear(4, 4)
                    print(f"trainable: {sum(p.numel() for p in self.parameters())}")
            """,
        "main.py": """\
            from omegaconf import OmegaConf

            trainer_config = OmegaConf.create()
            trainer_config["accelerator"] = "ddp"
            """,
        "configs/autoencoder.yaml": "model:\n  target: ldm.models.autoencoder.AutoencoderKL\n",
    }
    script = project(tmp_path / "ddp", files)
    assert [(f.line, f.rule) for f in check_file(script)] == [(8, "print-on-every-rank")]
    alone = dict(files, **{"main.py": files["main.py"].replace('"ddp"', '"gpu"')})
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "alone", alone))] == []
    one_device = dict(files, **{"main.py": files["main.py"] + '            trainer_config["devices"] = [0]\n'})  # vocos
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "one-device", one_device))] == []


def test_a_project_function_that_gets_its_logger_from_a_helper_at_a_level_it_passes_logs_as_that_level(tmp_path):
    """The project-reading side of the caller's level: ``trainer.py`` makes its logger at its top with
    ``setup_logging("train.log", level)`` and ``run`` logs with it; on every rank only when the level it passes is
    INFO or lower (WARNING was taken as every rank too, once a caller's level counted)."""
    def files(level: str) -> dict[str, str]:
        return {
            "main.py": """\
                import torch.distributed as dist
                from trainer import run

                if __name__ == "__main__":
                    dist.init_process_group("nccl")
                    run()
                """,
            "trainer.py": f"""\
                import logging
                from log_utils import setup_logging

                logger = setup_logging("train.log", {level})


                def run():
                    logger.info("step 1")
                """,
            "log_utils.py": """\
                import logging

                def setup_logging(log_file, level):
                    logger = logging.getLogger("train")
                    logger.setLevel(level)
                    logger.addHandler(logging.StreamHandler())
                    return logger
                """,
        }
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "info", files("logging.INFO")))] == [
        (6, "log-on-every-rank")]
    assert [(f.line, f.rule) for f in check_file(project(tmp_path / "warning", files("logging.WARNING")))] == []
