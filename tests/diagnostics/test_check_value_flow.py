"""paratrain check follows values through the script: however a name is bound, and through the values it is given.

Each script here is written for the test: a sampler bound by tuple unpacking (and the other forms of binding a
name), loguru's default sink left on until after a log line, an accuracy over a sharded loader handed to a
function and printed per rank, a validation loss summed over an Accelerate-prepared loader and reported from
the main process, a print helper called with a literal rank, and a rendezvous port that reaches
MASTER_PORT through a flag's default.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from paratrain.diagnostics.check import check_file, check_source


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


def project(root: Path, files: dict[str, str]) -> Path:
    """Write the files (the first one is the script) under ``root``, marked as a project, and return the script."""
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return root / next(iter(files))


_SAMPLER_FORMS = {
    "tuple": "train_sampler, shuffle = DistributedSampler(ds), False",
    "list": "[shuffle, train_sampler] = [False, DistributedSampler(ds)]",
    "starred": "train_sampler, *rest = DistributedSampler(ds), False, None",
    "annotated": "train_sampler: DistributedSampler = DistributedSampler(ds)",
    "walrus": "if (train_sampler := DistributedSampler(ds)) is not None: pass",
    "attribute": "self.train_sampler, self.shuffle = DistributedSampler(ds), False",
}


@pytest.mark.parametrize("form", sorted(_SAMPLER_FORMS))
def test_a_sampler_is_known_however_its_name_is_bound(form):
    binding = _SAMPLER_FORMS[form]
    name = "self.train_sampler" if form == "attribute" else "train_sampler"
    source = f"""\
from torch.utils.data import DataLoader, DistributedSampler

class Trainer:
    def fit(self, ds):
        {binding}
        loader = DataLoader(ds, sampler={name})
        for epoch in range(10):
            for batch in loader:
                pass
"""
    assert (5, "no-set-epoch") in rules(source)
    told = source.replace("            for batch", f"            {name}.set_epoch(epoch)\n            for batch")
    assert "no-set-epoch" not in {rule for _, rule in rules(told)}


def test_a_name_unpacked_from_a_call_stays_unknown():
    source = """\
from torch.utils.data import DataLoader
from data import make_samplers

train_sampler, val_sampler = make_samplers(ds)
loader = DataLoader(ds, sampler=train_sampler)
for epoch in range(10):
    for batch in loader:
        pass
"""
    assert "no-set-epoch" not in {rule for _, rule in rules(source)}


def test_loguru_logs_on_every_rank_before_the_script_removes_its_default_sink():
    source = """\
import os
import torch.distributed as dist
from loguru import logger

def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("nccl")
    logger.info("process group initialized")
    if rank != 0:
        logger.remove()
    logger.info("training")

main()
"""
    assert [line for line, rule in rules(source) if rule == "log-on-every-rank"] == [8]
    removed_first = source.replace('    logger.info("process group initialized")\n', "")
    assert "log-on-every-rank" not in {rule for _, rule in rules(removed_first)}
    # a sink chosen in another function may run first: the order is not the file's to tell
    elsewhere = source.replace("    if rank != 0:\n        logger.remove()\n", "") + "def quiet():\n    logger.remove()\n"
    assert "log-on-every-rank" not in {rule for _, rule in rules(elsewhere)}


def test_an_accuracy_counted_over_a_sharded_loader_handed_to_a_function_is_one_ranks():
    source = """\
import torch
from torch.utils.data import DataLoader, DistributedSampler

def compute_accuracy(model, dataloader):
    correct = total = 0
    for features, labels in dataloader:
        correct += (model(features).argmax(1) == labels).sum()
        total += len(labels)
    return (correct / total).item()

def main(rank, model, train_ds, test_ds):
    train_loader = DataLoader(train_ds, sampler=DistributedSampler(train_ds))
    test_loader = DataLoader(test_ds)
    test_acc = compute_accuracy(model, test_loader)
    train_acc = compute_accuracy(model, train_loader)
    print(f"[GPU{rank}] accuracy", train_acc, test_acc)
"""
    assert [line for line, rule in rules(source) if rule == "ungathered-metric"] == [15]
    reduced = source.replace("    return (correct", "    torch.distributed.all_reduce(correct)\n    return (correct")
    assert "ungathered-metric" not in {rule for _, rule in rules(reduced)}
    unsharded = source.replace("sampler=DistributedSampler(train_ds)", "shuffle=True")
    assert "ungathered-metric" not in {rule for _, rule in rules(unsharded + "torch.distributed.init_process_group('gloo')\n")}


def test_a_validation_loss_summed_over_an_accelerate_prepared_loader_and_reported_is_one_ranks():
    source = """\
from accelerate import Accelerator

def main(model, train_dataloader, eval_dataloader, wandb):
    accelerator = Accelerator()
    model, train_dataloader, eval_dataloader = accelerator.prepare(model, train_dataloader, eval_dataloader)
    best_loss = float("inf")
    for epoch in range(3):
        total_val_loss = 0
        for step, batch in enumerate(eval_dataloader):
            total_val_loss += model(batch).detach().float()
        if accelerator.is_main_process:
            result = {"epoch": epoch}
            result["val_loss"] = round(total_val_loss.item() / len(eval_dataloader), 4)
            wandb.log(result)
            if result["val_loss"] < best_loss:
                best_loss = result["val_loss"]
"""
    assert [line for line, rule in rules(source) if rule == "ungathered-metric"] == [13]
    # reduced across ranks first, or made of the training loader, or never reported: nothing to say
    reduced = source.replace("        if accelerator.is_main_process:",
                             "        total_val_loss = accelerator.reduce(total_val_loss)\n        if accelerator.is_main_process:")
    training = source.replace("enumerate(eval_dataloader)", "enumerate(train_dataloader)")
    unreported = source.replace("            wandb.log(result)\n", "").replace("result[\"val_loss\"] < best_loss", "epoch < 2")
    for quiet in (reduced, training, unreported):
        assert "ungathered-metric" not in {rule for _, rule in rules(quiet)}


def test_a_print_helper_given_a_rank_written_as_a_number_prints_on_every_rank(tmp_path):
    script = project(tmp_path, {
        "train.py": """\
            import torch.distributed as dist
            from utils import print_rank_0

            dist.init_process_group("nccl")
            rank = dist.get_rank()
            print_rank_0("starting", rank)
            for name in ["w", "b"]:
                print_rank_0(name, 0)
            print_rank_0(name, rank=-1)
            print_rank_0("done", 1)
            """,
        "utils.py": """\
            def print_rank_0(msg, rank=0):
                if rank <= 0:
                    print(msg)
            """,
    })
    assert [(f.line, f.rule) for f in check_file(script)] == [(8, "print-on-every-rank")]
    assert "also lines 9" in check_file(script)[0].problem
    # the same helper in the script itself
    own = (tmp_path / "utils.py").read_text() + (tmp_path / "train.py").read_text().replace("from utils import print_rank_0\n", "")
    assert [line for line, rule in rules(own) if rule == "print-on-every-rank"] == [10]


def test_a_flag_default_that_reaches_master_port_through_a_function_is_a_fixed_port():
    source = """\
import os
import torch.distributed as dist
from absl import app, flags

flags.DEFINE_integer("master_port", 12355, "Master port.")
FLAGS = flags.FLAGS

def setup(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)

def main(argv):
    setup(0, 1, FLAGS.master_port)

app.run(main)
"""
    assert (5, "hardcoded-rendezvous") in rules(source)
    unset_only = source.replace('    os.environ["MASTER_PORT"] = str(port)',
                                '    if "MASTER_PORT" not in os.environ:\n        os.environ["MASTER_PORT"] = str(port)')
    assert (5, "hardcoded-rendezvous") not in rules(unset_only)


def test_an_option_default_that_a_function_of_the_project_writes_to_master_port_is_a_fixed_port(tmp_path):
    script = project(tmp_path, {
        "train.py": """\
            import argparse
            import common_utils

            parser = argparse.ArgumentParser()
            parser.add_argument("--launcher", default="none")
            parser.add_argument("--tcp_port", type=int, default=18888)
            args = parser.parse_args()
            getattr(common_utils, "init_dist_%s" % args.launcher)(args.tcp_port, backend="nccl")
            """,
        "common_utils.py": """\
            import os
            import torch.distributed as dist

            def init_dist_slurm(tcp_port, backend="nccl"):
                os.environ["MASTER_PORT"] = str(tcp_port)
                dist.init_process_group(backend=backend)
            """,
    })
    assert (6, "hardcoded-rendezvous") in [(f.line, f.rule) for f in check_file(script)]


def test_a_model_whose_submodules_were_replaced_by_their_wrappers_saves_prefixed_keys():
    source = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def save(dlrm, path):
    torch.save({"state_dict": dlrm.state_dict(), "epoch": 1}, path)

dist.init_process_group("nccl")
dlrm = make_model()
dlrm.bot_l = DDP(dlrm.bot_l)
dlrm.top_l = DDP(dlrm.top_l)
save(dlrm, "model.pt")
"""
    assert (6, "wrapped-state-dict") in rules(source)
    # a wrapper kept beside the model is not one of its submodules
    beside = source.replace("dlrm.bot_l = DDP(dlrm.bot_l)\ndlrm.top_l = DDP(dlrm.top_l)", "trainer.model = DDP(dlrm)")
    assert "wrapped-state-dict" not in {rule for _, rule in rules(beside)}


def test_a_wrappers_state_dict_chosen_by_a_conditional_expression_reaches_the_checkpoint():
    source = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

def save_checkpoint(args, model, cpu_state):
    checkpoint = {"epoch": 1, "state_dict": cpu_state if args.fsdp else model.state_dict()}
    torch.save(checkpoint, "model.pt")

dist.init_process_group("nccl")
model = DistributedDataParallel(make_model())
save_checkpoint(args, model, None)
"""
    assert (6, "wrapped-state-dict") in rules(source)
    unwrapped = source.replace("else model.state_dict()", "else model.module.state_dict()")
    assert "wrapped-state-dict" not in {rule for _, rule in rules(unwrapped)}


@pytest.mark.parametrize("binding", ["sd, epoch = model.state_dict(), 3", "if (sd := model.state_dict()) is not None: pass"])
def test_a_wrappers_state_dict_is_followed_however_its_name_is_bound(binding):
    source = f"""\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl")
model = DistributedDataParallel(make_model())
{binding}
torch.save({{"model": sd}}, "model.pt")
"""
    assert (7, "wrapped-state-dict") in rules(source)


def test_an_annotated_logger_is_a_logger_and_its_line_in_an_except_block_tells_one_process_failure():
    source = """\
import logging
import torch.distributed as dist

logging.basicConfig(level=logging.INFO)
logger: logging.Logger = logging.getLogger(__name__)

def train():
    dist.init_process_group("nccl")
    try:
        logger.info("training")
    except Exception:
        logger.info("failed")
        raise

train()
"""
    assert [line for line, rule in rules(source) if rule == "log-on-every-rank"] == [10]
    assert "also lines" not in next(f.problem for f in check_source(source) if f.rule == "log-on-every-rank")

