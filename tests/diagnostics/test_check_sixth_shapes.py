"""paratrain check on the shapes behind its false findings and misses on the sixth corpus of public scripts.

Each script here is written for the test (docs/check_corpus.md, "A sixth corpus"): mixed-precision set-up
that starts no processes, a launcher reached through a command function, a project's own print, a
conditional DDP wrapper, module methods chained on a wrapper, a state dict saved under another name,
Python 3.6 keywords, the functional data_parallel, LOCAL_RANK read through os.getenv, per-rank files named
in a composed path and usage blocks (samplers: test_check_samplers.py).
"""

from __future__ import annotations

from paratrain.diagnostics.check import check_source


def rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(source)]


def test_apex_amp_initialize_starts_no_processes():
    source = """\
import torch
from apex import amp
model = torch.nn.Linear(2, 2).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
model = torch.nn.DataParallel(model)
print("training")
torch.save(model.module.state_dict(), "model.pt")
"""
    assert rules(source) == [(6, "data-parallel")]
    with_group = source.replace("import torch\n", "import torch\ntorch.distributed.init_process_group('nccl')\n")
    assert (8, "print-on-every-rank") in rules(with_group)
    mmcv_wrapper = source.replace("torch.nn.DataParallel(model)", "MMDistributedDataParallel(model.cuda())")
    assert rules(mmcv_wrapper) == [(7, "print-on-every-rank"), (8, "save-on-every-rank")]


def test_a_launch_function_called_from_a_command_function_runs_in_the_parent():
    source = """\
import click
import torch.distributed as dist
import torch.multiprocessing as mp

def launch_training(options):
    print("Training options:", options)
    mp.spawn(fn=worker, args=(options,), nprocs=options["gpus"])

def worker(rank, options):
    dist.init_process_group("gloo", rank=rank, world_size=options["gpus"])
    print("worker ready")

@click.command()
@click.option("--gpus", default=2)
def main(gpus):
    launch_training({"gpus": gpus})

if __name__ == "__main__":
    main()
"""
    assert rules(source) == [(11, "print-on-every-rank")]
    called_from_worker = source.replace('    print("worker ready")', '    print("worker ready")\n    launch_training({})')
    assert rules(called_from_worker) == [(6, "print-on-every-rank")]


def test_a_print_given_keywords_only_a_replaced_print_takes_is_rank_aware():
    source = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import helpers

helpers.init()
model = (DDP if dist.is_initialized() else helpers.NullDDP)(torch.nn.Linear(2, 2))
print("built the model", force=True)
print("every rank: its loss")
if helpers.is_local_master():
    torch.save(model.module.state_dict(), "last.pth")
"""
    assert rules(source) == [(11, "save-on-every-rank")]
    plain = source.replace(', force=True)', ')')
    assert rules(plain) == [(8, "print-on-every-rank"), (11, "save-on-every-rank")]


def test_wrapper_state_dicts_through_module_methods_and_other_names():
    source = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
model = torch.nn.DataParallel(torch.nn.Linear(2, 2)).to("cuda")
torch.save(model.state_dict(), "best.pth")

def save(encoder, epoch):
    encoder_state = encoder.state_dict()
    if dist.get_rank() == 0:
        torch.save({"encoder": encoder_state, "epoch": epoch}, "latest.pth")

encoder = DistributedDataParallel(torch.nn.Linear(2, 2))
save(encoder, 0)
"""
    assert rules(source) == [(4, "data-parallel"), (5, "save-on-every-rank"), (5, "wrapped-state-dict"),
                             (8, "wrapped-state-dict")]
    unwrapped = source.replace("encoder_state = encoder.state_dict()", "encoder_state = encoder.module.state_dict()")
    assert (8, "wrapped-state-dict") not in rules(unwrapped)


def test_a_script_for_python_3_6_is_read_with_its_async_keyword():
    source = """\
import torch
model = torch.nn.DataParallel(torch.nn.Linear(2, 2)).cuda()
for inputs in []:
    inputs = inputs.cuda(async=True)
"""
    assert rules(source) == [(2, "data-parallel")]


def test_the_functional_data_parallel_is_data_parallel():
    source = """\
import torch.nn as nn
class Generator(nn.Module):
    def forward(self, x):
        if x.is_cuda and self.ngpu > 1:
            return nn.parallel.data_parallel(self.main, x, range(self.ngpu))
        return self.main(x)
"""
    assert rules(source) == [(5, "data-parallel")]
    assert rules(source.replace("nn.parallel.data_parallel", "my_helpers.data_parallel")) == []


def test_local_rank_flag_defaulting_to_the_environment_is_what_torchrun_gives():
    source = """\
import argparse, os
import torch
import torch.distributed as dist
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", default=os.getenv("LOCAL_RANK", 0), type=int)
args = parser.parse_args()
torch.cuda.set_device(args.local_rank)
dist.init_process_group("nccl")
"""
    assert rules(source) == []
    assert rules(source.replace('os.getenv("LOCAL_RANK", 0)', "0")) == [(5, "local-rank-argument")]


def test_a_file_per_rank_named_in_a_composed_path():
    source = """\
import os
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
shard_name = f"optimizer.{dist.get_rank():05d}-of-{dist.get_world_size():05d}.pth"
torch.save(optimizer.state_dict(), os.path.join("ckpt", shard_name))
"""
    assert rules(source) == []
    shared = source.replace('f"optimizer.{dist.get_rank():05d}-of-{dist.get_world_size():05d}.pth"', '"optimizer.pth"')
    assert rules(shared) == [(7, "save-on-every-rank")]


def test_deprecated_launcher_is_found_at_the_usage_command():
    source = """\
import os
import torch.distributed as dist
# the old way passed --local_rank from torch.distributed.launch; LOCAL_RANK comes from the environment now
local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
# usage: start it with torch.distributed.launch
#   python -m torch.distributed.launch --nproc_per_node 4 main.py
"""
    assert rules(source) == [(7, "deprecated-launcher")]
    prose_only = source.replace("#   python -m torch.distributed.launch --nproc_per_node 4 main.py\n", "")
    assert rules(prose_only) == [(3, "deprecated-launcher")]
