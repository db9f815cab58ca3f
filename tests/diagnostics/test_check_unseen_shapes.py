"""paratrain check on the shapes behind its false findings and misses on unseen public scripts.

Each script here is written for the test; the patterns are the ones benchmarks/check_corpus.py's
held-out corpus turned up (docs/check_corpus.md): rank helpers, launcher parents, single-process
branches, Fabric/Accelerate scripts, rendezvous values from the environment vs literals, module
aliases, logging, un-gathered metrics and per-rank splits.
"""

from __future__ import annotations

from paratrain.diagnostics.check import check_source

HEAD = """\
import os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
dist.init_process_group("nccl")
"""


def rules(source: str, head: str = HEAD) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in check_source(head + source)]


# ---- local-rank-argument: the flag kept only so the old launcher's argument parses --------------
def test_local_rank_flag_with_local_rank_read_from_the_environment():
    source = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()
args.local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(args.local_rank)
"""
    assert rules(source) == []
    unused = 'import argparse\nargparse.ArgumentParser().add_argument("--local-rank", type=int)\n'
    assert rules(unused) == []
    required = 'import argparse\nargparse.ArgumentParser().add_argument("--local_rank", type=int, required=True)\n'
    assert rules(required) == [(7, "local-rank-argument")]


# ---- hardcoded-rendezvous: built from the run vs literal -----------------------------------------
def test_rendezvous_built_from_the_environment_or_a_runtime_port_is_not_hard_coded():
    source = """
url = "tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
port = find_free_port()
other = f"tcp://127.0.0.1:{port}"
os.environ.setdefault("MASTER_PORT", "29500")
os.environ["MASTER_ADDR"] = "localhost"
"""
    assert rules(source) == []


def test_master_addr_and_port_literals_are_hard_coded():
    source = """
os.environ["MASTER_ADDR"] = "10.1.2.3"
os.environ["MASTER_PORT"] = "12355"
dist.init_process_group("gloo", init_method="tcp://10.1.2.3:23456")
"""
    assert rules(source) == [(7, "hardcoded-rendezvous"), (8, "hardcoded-rendezvous"), (9, "hardcoded-rendezvous")]


# ---- samplers through a BatchSampler --------------------------------------------------------------
def test_distributed_sampler_wrapped_in_a_batch_sampler_is_used():
    source = """
from torch.utils.data import BatchSampler
sampler = DistributedSampler(train_dataset)
batches = BatchSampler(sampler, 32, drop_last=True)
loader = DataLoader(train_dataset, batch_sampler=batches)
for epoch in range(3):
    loader.batch_sampler.sampler.set_epoch(epoch)
"""
    assert rules(source) == []


# ---- rank-0 guards ----------------------------------------------------------------------------------
def test_helpers_that_return_a_rank_test_guard():
    source = """
def is_primary(args):
    return args.rank == 0

def save(state):
    if is_primary(args):
        torch.save(state, "ckpt.pt")
    if not is_main_process():
        return
    print("saved")

save({})
"""
    assert rules(source) == []


def test_parent_of_a_launcher_runs_once():
    source = """
from detectron2.engine import launch

def main(args):
    pass

def invoke_main():
    args = parse()
    print("Command Line Args:", args)
    launch(main, 8, args=(args,))

if __name__ == "__main__":
    invoke_main()
"""
    assert rules(source) == []


def test_single_process_branch_and_uncalled_function():
    source = """
if args.distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "m.pt")
else:
    print("one process")
    torch.save(model.state_dict(), "m.pt")

def unused_export(model):
    torch.save(model, "export.pt")

if __name__ == "__main__":
    pass
"""
    assert rules(source) == []


# ---- Fabric / Accelerate scripts are multi-process ---------------------------------------------------
FABRIC = """\
import torch
import lightning as L
fabric = L.Fabric(accelerator="cuda", devices=4, strategy="ddp")
fabric.launch()
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
print("epoch done")
torch.save(model.state_dict(), "model.pt")
fabric.print("rank-aware")
fabric.save("state.ckpt", {"model": model})
"""


def test_fabric_script_is_multi_process():
    assert rules("", head=FABRIC) == [(5, "batchnorm-without-syncbn"), (7, "print-on-every-rank"),
                                      (8, "save-on-every-rank")]


# ---- module aliases, logging, metrics, splits ---------------------------------------------------------
def test_torch_save_through_a_module_alias():
    assert rules("import torch as th\nth.save(model.state_dict(), 'm.pt')\n") == [(7, "save-on-every-rank")]
    assert rules("from torch import save\nsave(model.state_dict(), 'm.pt')\n") == [(7, "save-on-every-rank")]


def test_logging_info_on_every_rank():
    source = """
import logging
logging.basicConfig(level=logging.INFO)
logger = logging.getLogger(__name__)
logger.info("epoch 1")
"""
    assert rules(source) == [(10, "log-on-every-rank")]
    by_rank = source.replace("level=logging.INFO", "level=logging.INFO if dist.get_rank() == 0 else logging.WARN")
    assert rules(by_rank) == []
    level_unset = source.replace("logging.basicConfig(level=logging.INFO)\n", "")
    assert rules(level_unset) == []


def test_eval_metric_of_one_shard_is_reported_ungathered():
    source = """
val_sampler = DistributedSampler(val_dataset, shuffle=False, drop_last=True)
val_loader = DataLoader(val_dataset, batch_size=64, sampler=val_sampler)

def evaluate(model):
    correct = total = 0
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    print(f"accuracy {correct / total:.3f}")
"""
    assert rules(source) == [(7, "padded-eval-sampler"), (15, "print-on-every-rank"), (15, "ungathered-metric")]
    reduced = source.replace("    print(", "    dist.all_reduce(counts)\n    print(")
    assert rules(reduced) == [(7, "padded-eval-sampler"), (16, "print-on-every-rank")]


def test_random_split_not_seeded_alike_on_every_rank():
    source = """
from torch.utils.data import random_split
torch.manual_seed(1234 + dist.get_rank())
train_set, test_set = random_split(dataset, [0.9, 0.1])
"""
    assert rules(source) == [(9, "unseeded-split")]
    seeded = source.replace("[0.9, 0.1])", "[0.9, 0.1], generator=torch.Generator().manual_seed(0))")
    assert rules(seeded) == []
    alike = source.replace(" + dist.get_rank()", "")
    assert rules(alike) == []


# ---- second round: the shapes behind the first held-out half's false findings and misses ------------
def test_method_calls_are_resolved_by_their_receiver():
    source = """\
import torch
from accelerate import Accelerator

class Trainer:
    def __init__(self):
        self.accelerator = Accelerator()

    def save(self, step):
        torch.save({"step": step}, f"model-{step}.pt")

    def train(self):
        for step in range(10):
            if self.accelerator.is_main_process:
                self.save(step)
        self.accelerator.save({}, "state.pt")
        torch.save({}, "every-rank.pt")
"""
    # torch.save and accelerator.save are not calls of Trainer.save: only self.save(...) is, under a rank test.
    assert rules(source, head="") == [(16, "save-on-every-rank")]


def test_log_level_chosen_by_rank_in_an_if_else():
    source = """
import logging
logging.basicConfig()
logger = logging.getLogger()
if dist.get_rank() == 0:
    logger.setLevel(logging.INFO)
else:
    logger.setLevel(logging.ERROR)
logger.info("epoch 1")
"""
    assert rules(source) == []
    by_variable = """
import logging
level = logging.WARNING
if dist.get_rank() == 0:
    level = logging.INFO
logging.basicConfig(level=level)
logging.info("epoch 1")
"""
    assert rules(by_variable) == []


def test_a_function_of_the_file_named_launch_does_not_start_processes():
    source = """\
def launch():
    print("submitted")

if __name__ == "__main__":
    launch()
"""
    assert rules(source, head="") == []
    submitit = """\
import logging
import submitit
logging.basicConfig(level=logging.INFO)
logger = logging.getLogger()

class Trainer:
    def __call__(self):
        logger.info("running")

def launch():
    executor = submitit.AutoExecutor(folder="logs")
    executor.update_parameters(nodes=2, tasks_per_node=8)
    job = executor.submit(Trainer())
    print(job.job_id)

if __name__ == "__main__":
    launch()
"""
    # submitit's executor starts the tasks: Trainer.__call__ runs in each of them, the print in the submitter.
    assert rules(submitit, head="") == [(8, "log-on-every-rank")]


def test_lightning_trainer_on_several_devices_is_multi_process():
    source = """\
import pytorch_lightning as pl
from pytorch_lightning.utilities import rank_zero_only

@rank_zero_only
def announce():
    print("rank zero only")

model = build_model()
print("built")
trainer = pl.Trainer(devices=4, strategy="ddp")
trainer.fit(model)
"""
    assert rules(source, head="") == [(9, "print-on-every-rank")]
    from_argv = source.replace('pl.Trainer(devices=4, strategy="ddp")', "pl.Trainer.from_argparse_args(args)")
    assert rules(from_argv, head="") == [(9, "print-on-every-rank")]
    one_device = source.replace('devices=4, strategy="ddp"', "max_epochs=3")
    assert rules(one_device, head="") == []
    hf_trainer = 'from transformers import Trainer\nprint("built")\nTrainer(model=model, args=args).train()\n'
    assert rules(hf_trainer, head="") == []


def test_shuffle_inside_a_dataset_class_is_a_split_per_rank():
    source = """
import random
from torch.utils.data import Dataset

class SupervisedDataset(Dataset):
    def __init__(self, pairs):
        random.shuffle(pairs)
        self.pairs = pairs

    def __getitem__(self, i):
        return self.pairs[i]
"""
    assert rules(source) == [(12, "unseeded-split")]
    seeded = source + "\ndef main():\n    random.seed(0)\n    SupervisedDataset(load())\n"
    assert rules(seeded) == []
    # An HF Trainer script run by torchrun that only calls torch.distributed (no init_process_group here).
    under_torchrun = "import torch.distributed as dist" + source + "\nif dist.get_rank() == 0:\n    prepare()\ndist.barrier()\n"
    assert rules(under_torchrun, head="") == [(7, "unseeded-split")]


def test_code_that_exits_before_the_launcher_starts_processes_runs_once():
    source = """\
import lightning as L

def setup(model_name):
    if model_name == "list":
        print("models: a, b")
        quit()
    fabric = L.Fabric(devices=2)
    fabric.launch()
    print("launched")

setup("list")
"""
    assert rules(source, head="") == [(9, "print-on-every-rank")]



# ---- save-on-every-rank: a guard kept in a variable, a file per rank ----------------------------
def test_a_rank_test_kept_in_a_variable_guards_what_it_gates():
    source = """
save_logs = args.save_logs and dist.get_rank() == 0
if save_logs:
    torch.save(model.state_dict(), "last.pt")
"""
    assert rules(source) == []


def test_a_save_whose_path_names_the_rank_writes_a_file_per_rank():
    source = """
rank = dist.get_rank()
torch.save(queue, f"queue{rank}.pth")
queue_path = os.path.join(out, "queue" + str(args.rank) + ".pth")
torch.save(queue, queue_path)
torch.save(model.state_dict(), "model.pt")
"""
    assert rules(source) == [(11, "save-on-every-rank")]  # the shared file only


# ---- shapes from the fourth corpus (docs/check_corpus.md) ---------------------------------------
def test_a_byte_order_mark_at_the_start_is_read_like_python_reads_it():
    assert rules('\ufeffimport torch\ntorch.nn.DataParallel(model)\n', head="") == [(2, "data-parallel")]


def test_methods_calling_each_other_from_many_places_are_read_once_each():
    # 16 methods, each called by the two before it, all reached from a guarded `train`: read one
    # path of calls at a time, the save in the last one is reached along 2**15 paths.
    methods = "".join(f"    def step{i}(self):\n        self.step{i + 1}()\n        self.step{i + 2}()\n"
                      for i in range(14))
    source = f"""
class Trainer:
{methods}    def step14(self):
        self.step15()
    def step15(self):
        torch.save(self.state, "ckpt.pt")
    def train(self):
        if dist.get_rank() == 0:
            self.step0()
Trainer().train()
"""
    from paratrain.diagnostics import script_facts
    reads = []
    original = script_facts.ScriptFacts._callers_guard

    def counting(self, function, guards):
        reads.append(function)
        return original(self, function, guards)

    script_facts.ScriptFacts._callers_guard = counting
    try:
        assert rules(source) == []
    finally:
        script_facts.ScriptFacts._callers_guard = original
    assert len(reads) <= 3 * 18 * 18  # rounds over the 18 methods, not one read per path


def test_a_rank_test_or_another_condition_is_not_a_rank_guard():
    source = """
if dist.get_rank() == 0 or "stage_3" in strategy:
    torch.save(model.state_dict(), "a.pt")
if not args.distributed or dist.get_rank() == 0:
    torch.save(model.state_dict(), "b.pt")
if dist.get_world_size() == 1 or dist.get_rank() == 0:
    torch.save(model.state_dict(), "c.pt")
if args.distributed and dist.get_rank() == 0:
    torch.save(model.state_dict(), "d.pt")
"""
    assert rules(source) == [(8, "save-on-every-rank")]


def test_master_addr_and_port_set_only_when_unset_are_defaults():
    source = """
if "MASTER_PORT" in os.environ:
    pass
else:
    os.environ["MASTER_PORT"] = "29500"
if not os.getenv("MASTER_ADDR"):
    os.environ["MASTER_ADDR"] = "10.0.0.1"
os.environ["MASTER_PORT"] = "12355"
"""
    assert rules(source) == [(13, "hardcoded-rendezvous")]


def test_prints_and_saves_the_ranks_tell_apart():
    source = """
rank = dist.get_rank()
print(f"{rank + 1}/{dist.get_world_size()} ready")
is_root = backend.is_root_worker()
if backend.is_root_worker():
    print("training")
def save(path):
    if not is_root:
        return
    torch.save(model.state_dict(), path)
save("last.pt")
"""
    assert rules(source) == []


def test_a_spawn_index_handed_to_init_process_group_as_rank_is_the_global_rank():
    source = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def worker(local_rank, args):
    dist.init_process_group("gloo", init_method="env://", world_size=args.nprocs, rank=local_rank)
    args.local_rank = local_rank
    if args.local_rank == 0:
        torch.save({}, "ckpt.pt")

if __name__ == "__main__":
    mp.spawn(worker, nprocs=2, args=(object(),))
"""
    assert rules(source, head="") == []


def test_a_branch_on_a_library_main_process_test_makes_a_script_multi_process():
    source = """\
from transformers import Trainer
trainer = Trainer(model=model)
print("training")
trainer.train()
if trainer.is_world_process_zero():
    trainer.save_model("out")
"""
    assert rules(source, head="") == [(3, "print-on-every-rank")]


def test_a_sampler_chosen_by_a_conditional_expression_is_a_sampler():
    source = """
sampler = DistributedSampler(dataset) if distributed else None
loader = DataLoader(dataset, sampler=sampler)
for epoch in range(3):
    for batch in loader:
        pass
"""
    assert rules(source) == [(7, "no-set-epoch")]


def test_the_function_that_spawns_runs_in_the_parent_without_a_main_block():
    source = """\
import fire
import torch.multiprocessing as mp
import torch.distributed as dist

def run(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)

def train_from_folder(generate=False, gpus=2):
    if generate:
        print("samples written")
        return
    mp.spawn(run, args=(gpus,), nprocs=gpus)

def main():
    fire.Fire(train_from_folder)
"""
    assert rules(source, head="") == []


def test_a_logger_helper_called_on_its_own_line_sets_logging_up_elsewhere():
    source = """
import logging
logging.basicConfig(level=logging.INFO)
logger = logging.getLogger("project")
setup_logger()
logger.info("loading weights")
"""
    assert rules(source) == []


def test_a_print_naming_its_process_through_format_or_an_argument_is_tagged():
    source = """
def worker(gpu, args):
    print("worker on device {}".format(gpu))
    print("joined as", dist.get_rank())
    print("step %d of process %d" % (1, args.rank))
    print("building the model")
"""
    assert rules(source) == [(11, "print-on-every-rank")]


def test_an_experiment_tracker_init_starts_no_processes():
    source = """\
import torch
import wandb
wandb.init(project="toy")
print("one process")
torch.save({}, "model.pt")
"""
    assert rules(source, head="") == []


def test_a_rendezvous_url_joined_from_options_with_literal_defaults():
    source = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--host", default="192.168.7.7")
parser.add_argument("--rdzv-port", default=29111, type=int)
parser.add_argument("--local-host", default="127.0.0.1")
args = parser.parse_args()
url = "tcp://" + args.host + ":" + str(args.rdzv_port)
same_machine = f"tcp://{args.local_host}:{os.environ['MASTER_PORT']}"
"""
    assert rules(source) == [(9, "hardcoded-rendezvous"), (10, "hardcoded-rendezvous")]
    # each names the line that builds the address from it
    assert [f.problem.endswith("(also lines 13)") for f in check_source(HEAD + source)] == [True, True]


def test_a_local_rank_flag_overwritten_by_the_spawned_worker_is_never_read():
    source = """
import argparse
import torch.multiprocessing as mp
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)

def worker(index, args):
    args.local_rank = index
    torch.cuda.set_device(args.local_rank)

if __name__ == "__main__":
    mp.spawn(worker, args=(parser.parse_args(),), nprocs=2)
"""
    assert rules(source) == []
    read_first = source.replace("    args.local_rank = index\n", "").replace(
        "    torch.cuda.set_device(args.local_rank)\n", "    torch.cuda.set_device(args.local_rank)\n    args.local_rank = index\n")
    assert rules(read_first) == [(10, "local-rank-argument")]


def test_a_loader_read_in_one_pass_has_no_epoch_to_reshuffle():
    once = """
import torch.multiprocessing as mp
def fit(model, train_loader):
    for step, batch in enumerate(train_loader):
        model(batch)

def worker(index, dataset, model):
    sampler = DistributedSampler(dataset)
    train_loader = DataLoader(dataset, sampler=sampler)
    fit(model, train_loader)

if __name__ == "__main__":
    mp.spawn(worker, nprocs=2)
"""
    assert rules(once) == []
    every_epoch = once.replace("    fit(model, train_loader)", "    for epoch in range(3):\n        fit(model, train_loader)")
    assert rules(every_epoch) == [(13, "no-set-epoch")]
    cycled = "\nsampler = DistributedSampler(dataset)\nloader = DataLoader(dataset, sampler=sampler)\nbatches = cycle(loader)\n"
    assert rules(cycled) == [(7, "no-set-epoch")]
