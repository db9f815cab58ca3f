"""paratrain check's local-rank-argument rule, for a flag a project function defines: the finding names every line
where the flag enters the script (its first read, the call that builds the parser, argparse's parse of it)."""

from __future__ import annotations

import re

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project

ARGS = """
import argparse

def get_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    return parser
"""


def _local_rank(script) -> list[tuple[int, set[int]]]:
    """Each local-rank-argument finding: its line and the other lines it names."""
    found = []
    for finding in check_file(script):
        if finding.rule == "local-rank-argument":
            also = re.search(r"\(also lines ([\d, ]+)\)", finding.problem)
            found.append((finding.line, {int(n) for n in also.group(1).split(",")} if also else set()))
    return found


def test_a_parser_built_in_another_file_and_parsed_in_a_chain_is_named_at_its_read_and_its_parse(tmp_path):
    script = project(tmp_path, {"train.py": """
        import torch
        from tools.args import get_parser

        def train(args, model):
            return torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])

        def main():
            args = get_parser().parse_args()
            torch.distributed.init_process_group("nccl")
            train(args, torch.nn.Linear(2, 2))
        """, "tools/args.py": ARGS})
    assert _local_rank(script) == [(6, {9})]


def test_a_parser_bound_to_a_name_then_parsed_is_named_at_the_build_and_the_parse(tmp_path):
    script = project(tmp_path, {"train.py": """
        import torch
        from tools.args import get_parser

        parser = get_parser()
        parser.add_argument("--epochs", type=int, default=1)
        args = parser.parse_args()
        torch.distributed.init_process_group("nccl")
        torch.cuda.set_device(args.local_rank)
        """, "tools/args.py": ARGS})
    assert _local_rank(script) == [(9, {5, 7})]


USAGE = '''\
"""Pretraining."""
import os

import torch.distributed as dist

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
# To run on 2 nodes, 3 gpus each:
#   python -m torch.distributed.launch  \\
#       {flag}--nnodes 2  --nproc_per_node 3  \\
#       pretrain.py
'''


def test_a_usage_comment_with_use_env_and_no_local_rank_flag_is_not_the_old_launchers(tmp_path):
    """longformer's pretrain.py documents ``torch.distributed.launch --use_env``: LOCAL_RANK comes in the
    environment, as torchrun gives it, and the script parses no ``--local_rank``."""
    quiet = project(tmp_path / "env", {"pretrain.py": USAGE.format(flag="--use_env  ")})
    assert [f.line for f in check_file(quiet) if f.rule == "deprecated-launcher"] == []
    loud = project(tmp_path / "arg", {"pretrain.py": USAGE.format(flag="")})
    assert [f.line for f in check_file(loud) if f.rule == "deprecated-launcher"] == [9]
