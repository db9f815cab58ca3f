"""paratrain check on the shapes behind its false findings and misses on the seventh corpus of public scripts.

Each script here is written for the test (docs/check_corpus.md, "A seventh corpus"): a re-seed after the
model is built, a name that is set only on rank 0, `local_rank == -1` beside a rank test, a helper that
returns a per-machine test, a spawn index offset by the node, a project's reduce helper, stdout sent to
/dev/null, evaluation samplers made inline or by a helper, a COCO evaluator, a port option handed to
MASTER_PORT, state dicts saved in a list, a local-rank flag stored under another name, and `local_rank >= 0` (true
on every rank of a launched run, not once per machine).
"""

from __future__ import annotations

from paratrain.diagnostics.check import check_source


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


def test_a_seed_after_the_build_re_seeds_only_what_follows():
    source = """\
import torch
import torch.distributed as dist

class Net(torch.nn.Module):
    pass

dist.init_process_group("gloo")
torch.manual_seed(0)
net = Net()
torch.manual_seed(1 + dist.get_rank())
noise = torch.randn(4)
"""
    assert "model-before-seed" not in {rule for _, rule in rules(source)}
    unseeded = source.replace("torch.manual_seed(0)\n", "")
    assert (8, "model-before-seed") in rules(unseeded)


def test_a_name_set_only_on_rank_zero_guards_what_follows_its_test():
    source = """\
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
board = None
if rank == 0:
    board = open("board.txt", "w")
for step in range(3):
    if not board:
        continue
    print("step", step)
"""
    assert rules(source) == []
    set_everywhere = source.replace("if rank == 0:\n    board", "if True:\n    board")
    assert rules(set_everywhere) == [(10, "print-on-every-rank")]
    # compared, not tested for truth: the rank test of its binding is not read into the comparison
    compared = source.replace('board = open("board.txt", "w")', 'board = "shared"').replace(
        "if not board:", 'if not board == "shared":')
    assert rules(compared) == [(10, "print-on-every-rank")]


def test_a_parameter_reassigned_on_rank_zero_is_no_rank_test():
    source = """\
import torch.distributed as dist

def run(rank, size, path):
    dist.init_process_group("gloo", rank=rank, world_size=size)
    if path != "":
        print("resuming from", path)
    if rank == 0:
        path = "last.pt"
"""
    assert rules(source) == [(6, "print-on-every-rank")]


def test_local_rank_minus_one_beside_a_rank_test_is_one_process():
    source = """\
import argparse
import os
import torch
import torch.distributed as dist
parser = argparse.ArgumentParser()
args = parser.parse_args()
args.local_rank = int(os.environ.get("LOCAL_RANK", -1))
if args.local_rank != -1:
    dist.init_process_group("nccl")
model = torch.nn.Linear(2, 2)
if args.local_rank == -1 or dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")
"""
    assert rules(source) == []
    per_machine = source.replace("args.local_rank == -1 or dist.get_rank() == 0", "args.local_rank in [-1, 0]")
    assert rules(per_machine) == [(12, "save-on-every-rank")]


def test_a_helper_returning_rank_modulo_gpus_is_a_per_machine_test():
    source = """\
import torch
import torch.distributed as dist

def is_first(args):
    return args.rank % args.gpus_per_node == 0

def worker(args):
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    model = torch.nn.Linear(2, 2)
    if is_first(args):
        torch.save(model.state_dict(), "model.pt")
"""
    assert rules(source) == [(11, "save-on-every-rank")]
    global_helper = source.replace("args.rank % args.gpus_per_node == 0", "args.rank == 0")
    assert rules(global_helper) == []


def test_a_spawn_index_offset_by_the_node_is_a_local_rank():
    source = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def worker(gpu, args):
    args.rank = args.node * args.gpus + gpu
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world)
    model = torch.nn.Linear(2, 2)
    if gpu == 0:
        torch.save(model.state_dict(), "model.pt")

if __name__ == "__main__":
    mp.spawn(worker, args=(None,), nprocs=2)
"""
    assert rules(source) == [(10, "save-on-every-rank")]
    one_machine = source.replace("args.rank = args.node * args.gpus + gpu", "args.rank = gpu")
    assert rules(one_machine) == []


def test_a_project_reduce_helper_gathers_the_metric():
    source = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from project.utils import sum_over_ranks
dist.init_process_group("gloo")
val_sampler = DistributedSampler(val_set, shuffle=False)
val_loader = DataLoader(val_set, sampler=val_sampler)

def validate(model):
    correct = 0
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum().item()
    correct = sum_over_ranks(correct)
    print("val_acc", correct / len(val_set))
"""
    assert "ungathered-metric" not in {rule for _, rule in rules(source)}
    unreduced = source.replace("    correct = sum_over_ranks(correct)\n", "")
    assert (12, "ungathered-metric") in rules(unreduced)


def test_stdout_sent_to_devnull_off_rank_zero_silences_logging():
    source = """\
import logging
import os
import sys
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() != 0:
    sys.stdout = open(os.devnull, "w")
logging.basicConfig(level=logging.INFO, stream=sys.stdout)
logging.info("training")
"""
    assert rules(source) == []
    kept = source.replace('    sys.stdout = open(os.devnull, "w")\n', "    pass\n")
    assert rules(kept) == [(9, "log-on-every-rank")]


def test_evaluation_samplers_made_inline_or_by_a_helper_pad():
    inline = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
dist.init_process_group("gloo")
valid_loader = DataLoader(valid_data, batch_size=4, sampler=DistributedSampler(valid_data, seed=1))
"""
    assert rules(inline) == [(4, "padded-eval-sampler")]
    helper = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

def make_sampler(data):
    return DistributedSampler(data)

dist.init_process_group("gloo")
test_sampler = make_sampler(test_data)
test_loader = DataLoader(test_data, batch_size=4, sampler=test_sampler)
accuracy = evaluate(test_loader)
"""
    assert rules(helper) == [(5, "padded-eval-sampler")]
    training_only = helper.replace("test_", "train_")
    assert "padded-eval-sampler" not in {rule for _, rule in rules(training_only)}


def test_a_coco_evaluator_counts_padded_duplicates_once():
    source = """\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
dist.init_process_group("gloo")
sampler_val = DistributedSampler(dataset_val, shuffle=False)
loader_val = DataLoader(dataset_val, sampler=sampler_val)
coco_evaluator = CocoEvaluator(base_ds, ("bbox",))
stats = evaluate(model, loader_val)
"""
    assert rules(source) == []
    assert rules(source.replace("coco_evaluator = CocoEvaluator", "scores = Accuracy")) == [
        (4, "padded-eval-sampler")]


def test_a_port_option_handed_to_master_port_is_fixed():
    source = """\
import argparse
import os
import torch.multiprocessing as mp
parser = argparse.ArgumentParser()
parser.add_argument("--master_port", type=str, default="23456")
config = parser.parse_args()
os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = config.master_port
mp.spawn(train, nprocs=2, args=(config,))
"""
    assert rules(source) == [(5, "hardcoded-rendezvous")]
    no_default = source.replace(', default="23456"', "")
    assert rules(no_default) == []


def test_a_wrapper_state_dict_saved_in_a_list():
    source = """\
import torch
model = torch.nn.DataParallel(torch.nn.Linear(2, 2)).cuda()
states = [model.state_dict(), 3]
torch.save(states, "ckpt.pth")
"""
    assert rules(source) == [(2, "data-parallel"), (3, "wrapped-state-dict")]
    unwrapped = source.replace("model.state_dict()", "model.module.state_dict()")
    assert rules(unwrapped) == [(2, "data-parallel")]


def test_a_local_rank_flag_stored_under_its_first_long_name():
    source = """\
import argparse
import torch
import torch.distributed as dist
parser = argparse.ArgumentParser()
parser.add_argument("--rank", "--local_rank", default=0, type=int)
args = parser.parse_args()
torch.cuda.set_device(args.rank)
dist.init_process_group("nccl")
"""
    assert rules(source) == [(5, "local-rank-argument")]
    never_read = source.replace("torch.cuda.set_device(args.rank)\n", "")
    assert rules(never_read) == []


def test_a_local_rank_that_a_launcher_passed_is_every_rank_of_the_run():
    source = """\
import logging
import torch.distributed as dist

logging.basicConfig(level=logging.INFO)
logger = logging.getLogger(__name__)

def main(args):
    if args.local_rank >= 0:
        dist.init_process_group("nccl")
        logger.info("joined")
    if args.local_rank == 0:
        logger.info("first of the machine")
"""
    assert rules(source) == [(10, "log-on-every-rank")]
