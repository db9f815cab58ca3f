"""The hardcoded-rendezvous rule: an address or port fixed in the code, in the script or in its project."""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file, check_source
from tests.diagnostics.test_check_project_imports import git_project

_SPAWNING = """\
import os
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world_size, port):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


def main(config):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = config.port
    mp.spawn(run, nprocs=2, args=(2, config.port))
"""


def _rendezvous(findings) -> list[int]:
    return [finding.line for finding in findings if finding.rule == "hardcoded-rendezvous"]


def test_a_loopback_master_addr_beside_a_literal_port_is_one_finding_at_the_port() -> None:
    assert _rendezvous(check_source(_SPAWNING.replace("config.port\n", '"12355"\n', 1))) == [12]


def test_a_port_from_a_parameters_literal_default_that_the_call_leaves_is_fixed() -> None:
    source = """\
import os
import torch.distributed as dist


def init_dist(launcher="slurm", port=29500):
    port = os.environ.get("PORT", port)
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl")


init_dist(launcher="slurm")
"""
    assert _rendezvous(check_source(source)) == [7]
    assert _rendezvous(check_source(source.replace('launcher="slurm")\n', 'launcher="slurm", port=args.port)\n'))) == []


_OPTIONS = """\
import argparse


class Options:
    def __init__(self):
        self.parser = argparse.ArgumentParser()
        self.parser.add_argument("--local_rank", type=int, default=-1)
        self.parser.add_argument("--main_port", type=int, default=10001)

    def parse(self):
        return self.parser.parse_args()
"""

_SLURM = """\
import os
import torch
import torch.distributed as dist


def init_distributed_mode(params):
    if "SLURM_JOB_ID" in os.environ:
        assert params.local_rank == -1
        params.local_rank = int(os.environ["SLURM_LOCALID"])
        os.environ["MASTER_PORT"] = str(params.main_port)
    elif params.local_rank != -1:
        pass
    else:
        params.local_rank = 0
    torch.cuda.set_device(params.local_rank)
    dist.init_process_group("nccl")


def setup_distributed(num_gpus):
    if "SLURM_JOB_ID" in os.environ:
        os.environ["MASTER_PORT"] = str(29567 + num_gpus)
"""

_SCRIPT = """\
from src.options import Options
from src import slurm

options = Options()
opt = options.parse()
slurm.init_distributed_mode(opt)
"""


def test_options_of_another_file_reach_the_rendezvous_and_the_local_rank(tmp_path: Path) -> None:
    script = git_project(tmp_path, {"src/__init__.py": "", "src/options.py": _OPTIONS, "src/slurm.py": _SLURM,
                                 "train.py": _SCRIPT})
    assert {(finding.line, finding.rule) for finding in check_file(script)} == {
        (5, "local-rank-argument"), (6, "hardcoded-rendezvous")}


def test_a_literal_port_base_written_by_a_project_function(tmp_path: Path) -> None:
    script = git_project(tmp_path, {"src/__init__.py": "", "src/options.py": _OPTIONS, "src/slurm.py": _SLURM,
                                 "train.py": "from src import slurm\n\nslurm.setup_distributed(8)\n"})
    assert _rendezvous(check_file(script)) == [3]


def test_a_port_that_fills_an_unset_variable_is_a_default(tmp_path: Path) -> None:
    unset = _SLURM.replace('    if "SLURM_JOB_ID" in os.environ:\n        os.environ["MASTER_PORT"] = str(29567',
                           '    if "MASTER_PORT" not in os.environ:\n        os.environ["MASTER_PORT"] = str(29567')
    script = git_project(tmp_path, {"src/__init__.py": "", "src/options.py": _OPTIONS, "src/slurm.py": unset,
                                 "train.py": "from src import slurm\n\nslurm.setup_distributed(8)\n"})
    assert _rendezvous(check_file(script)) == []


def test_a_url_with_its_address_from_the_run_and_its_port_written_in_is_a_fixed_port() -> None:
    wrapper = (
        "import os, sys\n"
        "node0 = os.environ['SLURM_NODELIST'].split(',')[0]\n"
        "cmd = 'python {script} --dist-url tcp://{node0}:1234 --world-size {ws}'.format(script=sys.argv[1], node0=node0, ws=2)\n"
        "os.system(cmd)\n"
        "url = f'tcp://{node0}:23456'\n"
    )
    assert _rendezvous(check_source(wrapper)) == [3, 5]
    # the port from the run too: nothing fixed
    for built in ("'tcp://{}:{}'.format(node0, port)", "'tcp://%s:%s' % (node0, port)", "f'tcp://{node0}:{port}'"):
        assert _rendezvous(check_source(f"import os\nnode0 = port = os.environ['X']\nurl = {built}\n")) == [], built
