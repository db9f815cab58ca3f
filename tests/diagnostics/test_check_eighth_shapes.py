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
    rebound = source.replace("if accelerator.is_main_process:\n", "model = accelerator.unwrap_model(model)\nif accelerator.is_main_process:\n")
    assert "wrapped-state-dict" not in {rule for _, rule in rules(rebound)}
    moved = source.replace("if accelerator.is_main_process:\n", "model = model.to('cpu')\nif accelerator.is_main_process:\n")
    assert (10, "wrapped-state-dict") in rules(moved)


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


# ---- causes in another file of the project (check given the script's path) ------------------------------
def project_rules(root, files: dict[str, str]) -> list[tuple[int, str]]:
    """Write a project (the first file is the script) and check the script at its path."""
    import textwrap

    from paratrain.diagnostics.check import check_file

    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return [(f.line, f.rule) for f in check_file(root / next(iter(files)))]


def quiet_until_edited(root, files: dict[str, str], rule: str, line: int, edit: tuple[str, str, str]) -> None:
    """``rule`` says nothing about the project as written, and reports the script's ``line`` once ``edit``
    (a file, the text to replace, its replacement) takes away what made it quiet."""
    assert rule not in {found for _, found in project_rules(root, files)}
    name, old, new = edit
    files[name] = files[name].replace(old, new)
    assert (line, rule) in project_rules(root, files)


def test_a_module_that_replaces_print_when_imported_quiets_the_print_rule(tmp_path):
    files = {
        "train.py": """\
            import torch.distributed as dist
            import dist_utils
            dist.init_process_group("gloo")
            print("every rank?")
            """,
        "dist_utils.py": """\
            import builtins
            import torch.distributed as dist
            _print = builtins.print

            def rank0_print(*args, **kwargs):
                if not dist.is_initialized() or dist.get_rank() == 0:
                    _print(*args, **kwargs)

            builtins.print = rank0_print
            """,
    }
    quiet_until_edited(tmp_path, files, "print-on-every-rank", 4, ("dist_utils.py", "builtins.print = rank0_print", ""))


def test_local_rank_among_the_variables_a_project_helper_reads_from_the_environment(tmp_path):
    files = {
        "train.py": """\
            import argparse
            import torch
            import launch_env
            parser = argparse.ArgumentParser()
            parser.add_argument("--local_rank", type=int, default=-1)
            args = parser.parse_args()
            launch_env.init(local_rank=args.local_rank)
            """,
        "launch_env.py": """\
            import os
            import torch.distributed as dist

            def env2int(names, default=-1):
                for name in names:
                    if name in os.environ:
                        return int(os.environ[name])
                return default

            def init(local_rank=-1):
                if local_rank == -1:
                    local_rank = env2int(["OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"], 0)
                dist.init_process_group("gloo")
                return local_rank
            """,
    }
    quiet_until_edited(tmp_path, files, "local-rank-argument", 5, ("launch_env.py", '"LOCAL_RANK"', '"SLOT"'))


def test_a_log_formatter_that_writes_the_rank_tells_the_ranks_lines_apart(tmp_path):
    files = {
        "train.py": """\
            import logging
            import torch.distributed as dist
            from log_setup import init_logger
            dist.init_process_group("gloo")
            init_logger()
            logger = logging.getLogger()
            logger.info("starting")
            """,
        "log_setup.py": """\
            import logging
            import sys
            import torch.distributed as dist

            class RankFormatter(logging.Formatter):
                def format(self, record):
                    return f"{dist.get_rank()}: {record.getMessage()}"

            def init_logger():
                logger = logging.getLogger()
                logger.setLevel(logging.INFO)
                handler = logging.StreamHandler(sys.stdout)
                handler.setFormatter(RankFormatter())
                logger.addHandler(handler)
                return logger
            """,
    }
    quiet_until_edited(tmp_path, files, "log-on-every-rank", 7, ("log_setup.py", "RankFormatter()", "logging.Formatter()"))


def test_a_dataparallel_class_or_wrapping_function_of_the_project_is_data_parallel(tmp_path):
    files = {
        "train.py": """\
            import torch
            from parallel import Balanced
            from builders import load_model
            model = load_model(torch.nn.Linear(2, 2))
            loss = Balanced(torch.nn.MSELoss())
            torch.save(model.state_dict(), "model.pt")
            """,
        "parallel.py": """\
            import torch

            class Gathering(torch.nn.DataParallel):
                pass

            class Balanced(Gathering):
                pass
            """,
        "builders.py": """\
            import torch

            def load_model(model):
                if torch.cuda.device_count() > 1:
                    model = torch.nn.DataParallel(model)
                return model
            """,
    }
    found = project_rules(tmp_path, files)
    assert {(4, "data-parallel"), (5, "data-parallel"), (6, "wrapped-state-dict")} <= set(found)
    files["parallel.py"] = files["parallel.py"].replace("torch.nn.DataParallel", "torch.nn.Module")
    files["builders.py"] = files["builders.py"].replace("torch.nn.DataParallel(model)", "model.cuda()")
    assert not {rule for _, rule in project_rules(tmp_path, files)} & {"data-parallel", "wrapped-state-dict"}
