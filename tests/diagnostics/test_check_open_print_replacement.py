"""MAE's ``setup_for_distributed`` (and its many descendants) replaces builtins.print with one that prints on rank 0
only *until the job has more than 8 processes* (``force = force or (get_world_size() > 8)``). A script whose project
starts it in more processes than that prints every line on every rank; one started in 8 or fewer, or in a count
no command writes in numbers, stays quiet. Each project is written for the test in tmp_path."""

from __future__ import annotations

from paratrain.diagnostics.check import check_file
from paratrain.diagnostics.project_launches import launch_above
from tests.diagnostics.test_check_project_imports import project

MISC = """\
import builtins
import torch.distributed as dist


def get_world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def setup_for_distributed(is_master):
    builtin_print = builtins.print

    def print(*args, **kwargs):
        force = kwargs.pop('force', False)
        force = force or (get_world_size() > 8)
        if is_master or force:
            builtin_print(*args, **kwargs)

    builtins.print = print


def init_distributed_mode(args):
    dist.init_process_group("nccl")
    setup_for_distributed(args.rank == 0)
"""

MAIN = """\
import argparse
import torch.distributed as dist
from util import misc


def main(args):
    misc.init_distributed_mode(args)
    print("job dir")
    print(args)
    if dist.get_rank() == 0:
        print("only here")


if __name__ == "__main__":
    main(argparse.ArgumentParser().parse_args())
"""


def _prints(tmp_path, readme: str) -> list[tuple[int, str]]:
    script = project(tmp_path, {"main_pretrain.py": MAIN, "util/misc.py": MISC, "util/__init__.py": "",
                                "README.md": readme})
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "print-on-every-rank"]


def test_a_launch_above_the_replacements_size_prints_on_every_rank(tmp_path):
    readme = "```\npython -m torch.distributed.launch --nproc_per_node=8 --nnodes=4 --node_rank=0 \\\n  main_pretrain.py\n```\n"
    found = _prints(tmp_path, readme)
    assert [line for line, _ in found] == [8]
    assert "more than 8 processes" in found[0][1] and "README.md:2" in found[0][1] and "(also lines 9)" in found[0][1]


def test_eight_processes_or_a_count_in_a_variable_stay_quiet(tmp_path):
    assert _prints(tmp_path / "eight", "torchrun --nproc_per_node=8 main_pretrain.py\n") == []
    assert _prints(tmp_path / "variable", "torchrun --nproc_per_node=8 --nnodes=$NODES main_pretrain.py\n") == []


def test_a_world_size_test_outside_the_replacement_opens_nothing(tmp_path):
    quiet = MISC.replace("force = force or (get_world_size() > 8)", "force = force") + (
        "\n\ndef many():\n    return get_world_size() > 1\n")
    script = project(tmp_path, {"main_pretrain.py": MAIN, "util/misc.py": quiet, "util/__init__.py": "",
                                "README.md": "torchrun --nproc_per_node=8 --nnodes=4 main_pretrain.py\n"})
    assert [f for f in check_file(script) if f.rule == "print-on-every-rank"] == []


def test_the_launch_count_is_read_in_numbers_from_each_launcher(tmp_path):
    script = project(tmp_path, {"train.py": "print(1)\n", "run.sh": (
        "torchrun --nproc_per_node 4 --nnodes 1:2 train.py\n"        # elastic: at most 8
        "deepspeed --num_gpus 8 --num_nodes 2 train.py\n")})         # 16
    assert launch_above(script, 8).where == "run.sh:2"
    assert launch_above(script, 16) is None
    assert launch_above(script, 7).where == "run.sh:1"
