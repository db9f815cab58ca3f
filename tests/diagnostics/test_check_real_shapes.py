"""paratrain check on the shapes of public training scripts where it once raised false alarms.

Each script here is written for the test and has the shape of a pattern found in the corpus
scored by benchmarks/check_corpus.py (pytorch/examples, DeiT/DINO, SimSiam, the FSDP T5 example).
"""

from __future__ import annotations

from paratrain.diagnostics.check import check_source

HEAD = """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, Subset
dist.init_process_group("nccl")
"""


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(HEAD + source)]


def problems(source: str, rule: str) -> list[str]:
    return [f.problem for f in check_source(HEAD + source) if f.rule == rule]


# ---- save-on-every-rank: calls are followed within the file -------------------------------------
HELPER_UNDER_RANK = """
def write(state, path):
    torch.save(state, path)

for epoch in range(3):
    if dist.get_rank() == 0:
        write({"epoch": epoch}, "last.pt")
"""

METHOD_UNDER_GPU_ID = """
class Trainer:
    def __init__(self, model, gpu_id):
        self.gpu_id = gpu_id
        self.model = model

    def _save(self, epoch):
        torch.save(self.model.module.state_dict(), "ckpt.pt")

    def train(self, epochs):
        for epoch in range(epochs):
            if self.gpu_id == 0 and epoch % 5 == 0:
                self._save(epoch)
"""


def test_helper_called_only_under_a_rank_test_is_guarded():
    assert rules(HELPER_UNDER_RANK) == []
    assert rules(HELPER_UNDER_RANK.replace("    if dist.get_rank() == 0:\n        write", "    write")) == [
        (8, "save-on-every-rank")]


def test_method_called_only_under_gpu_id_zero_is_guarded():
    assert rules(METHOD_UNDER_GPU_ID) == []
    global_rank = METHOD_UNDER_GPU_ID.replace("gpu_id", "global_rank")
    assert rules(global_rank) == []


def test_one_unguarded_call_site_or_a_callback_keeps_the_finding():
    also_unguarded = METHOD_UNDER_GPU_ID + "\n    def close(self):\n        self._save(-1)\n"
    assert rules(also_unguarded) == [(13, "save-on-every-rank")]
    callback = HELPER_UNDER_RANK + "\ntorch.multiprocessing.spawn(write, nprocs=2)\n"
    assert rules(callback) == [(8, "save-on-every-rank")]


def test_local_rank_and_rank_modulo_gpus_guard_once_per_machine():
    from_env = METHOD_UNDER_GPU_ID.replace("self.gpu_id = gpu_id", "self.gpu_id = int(os.environ['LOCAL_RANK'])")
    per_machine = HELPER_UNDER_RANK.replace("dist.get_rank() == 0", "args.rank % ngpus_per_node == 0")
    for source in (from_env, per_machine):
        (problem,) = problems(source, "save-on-every-rank")
        assert "once per machine" in problem


# ---- padded-eval-sampler: drop_last=True and a loader for the remainder -----------------------------
REMAINDER = """
val_sampler = DistributedSampler(val_dataset, shuffle=False, drop_last=True)
val_loader = DataLoader(val_dataset, batch_size=64, sampler=val_sampler)

def validate(loader, world_size):
    evaluate(loader)
    covered = len(loader.sampler) * world_size
    if covered < len(loader.dataset):
        tail = Subset(loader.dataset, range(covered, len(loader.dataset)))
        evaluate(DataLoader(tail, batch_size=64))

validate(val_loader, 2)
"""


def test_drop_last_with_a_remainder_loader_is_exact():
    assert rules(REMAINDER) == []
    without_tail = REMAINDER.split("    covered =")[0] + "\nvalidate(val_loader, 2)\n"
    (problem,) = problems(without_tail, "padded-eval-sampler")
    assert "drops the last samples" in problem
    (padded,) = problems(without_tail.replace(", drop_last=True", ""), "padded-eval-sampler")
    assert "repeats samples" in padded


# ---- print-on-every-rank ------------------------------------------------------------------------
def test_prints_tagged_with_the_rank_are_not_print_on_every_rank():
    tagged = """
rank = dist.get_rank()
print(f"[GPU{rank}] epoch 1 | steps 10")
print(f"[{os.getpid()}] world_size = {dist.get_world_size()}")
"""
    assert rules(tagged) == []
    min_gpus = 2
    untagged = tagged + f'print(f"needs {{_min_gpu_count}} gpus")\n_min_gpu_count = {min_gpus}\n'
    assert rules(untagged) == [(10, "print-on-every-rank")]


def test_print_silenced_on_other_ranks_is_not_print_on_every_rank():
    chatty = "print('=> creating model')\n"
    assert rules(chatty) == [(6, "print-on-every-rank")]
    override = "import builtins\nif dist.get_rank() != 0:\n    builtins.print = lambda *a, **k: None\n"
    assert rules(override + chatty) == []
    helper = "import utils\nutils.init_distributed_mode(args)\n"
    assert rules(helper + chatty) == []


# ---- samplers through dicts and helpers ---------------------------------------------------------
def test_sampler_in_loader_kwargs_dict_and_handed_to_a_helper():
    source = """
train_sampler = DistributedSampler(train_dataset, shuffle=True)
val_sampler = DistributedSampler(val_dataset)
train_loader = DataLoader(train_dataset, **{"batch_size": 8, "sampler": train_sampler})
val_kwargs = {"batch_size": 8, "sampler": val_sampler}
val_loader = DataLoader(val_dataset, **val_kwargs)
for epoch in range(3):
    train_one_epoch(model, train_loader, epoch, sampler=train_sampler)
"""
    assert rules(source) == [(8, "padded-eval-sampler")]
    not_handed = source.replace(", sampler=train_sampler", "")
    assert rules(not_handed) == [(7, "no-set-epoch"), (8, "padded-eval-sampler")]


def test_local_rank_flag_kept_for_the_old_launcher_and_never_read():
    source = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", default=0, type=int, help="ignored")
args = parser.parse_args()
utils.init_distributed_mode(args)
"""
    assert rules(source) == []
    read = source + "torch.cuda.set_device(args.local_rank)\n"
    assert rules(read) == [(9, "local-rank-argument")]
