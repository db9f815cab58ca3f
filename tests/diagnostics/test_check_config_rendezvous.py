"""A rendezvous fixed in a configuration file the project ships (HiFi-GAN's ``dist_config``), read by ``check``."""

from __future__ import annotations

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project

_HIFIGAN = """\
import json
import sys
import torch
import torch.multiprocessing as mp
from torch.distributed import init_process_group

def train(rank, h):
    init_process_group(backend=h["dist_config"]["dist_backend"],
                       init_method=h["dist_config"]["dist_url"],
                       world_size=h["dist_config"]["world_size"] * h["num_gpus"], rank=rank)
{rewrite}
if __name__ == "__main__":
    h = json.load(open(sys.argv[1]))
    mp.spawn(train, nprocs=h["num_gpus"], args=(h,))
"""


def _config(url: str) -> str:
    return ('{\n  "num_gpus": 2,\n  "dist_config": {"dist_backend": "nccl", "dist_url": "%s", "world_size": 1}\n}\n'
            % url)


def _rendezvous(tmp_path, name, files) -> list[tuple[int, str]]:
    script = project(tmp_path / name, files)
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "hardcoded-rendezvous"]


def test_a_literal_url_in_the_shipped_config_is_reported_where_the_code_reads_it(tmp_path):
    found = _rendezvous(tmp_path, "literal", {"train.py": _HIFIGAN.format(rewrite=""),
                                              "config_v1.json": _config("tcp://localhost:54321")})
    assert [line for line, _ in found] == [9]
    assert "'dist_url', which config_v1.json sets to the literal 'tcp://localhost:54321'" in found[0][1]


def test_a_config_without_a_literal_or_a_key_the_code_sets_itself_is_not(tmp_path):
    assert _rendezvous(tmp_path, "env", {"train.py": _HIFIGAN.format(rewrite=""),
                                         "config_v1.json": _config("env://")}) == []
    free_port = '    h["dist_config"]["dist_url"] = "tcp://localhost:%d" % find_free_port()\n'
    assert _rendezvous(tmp_path, "rewritten", {"train.py": _HIFIGAN.format(rewrite=free_port),
                                               "config_v1.json": _config("tcp://localhost:54321")}) == []


def test_a_master_port_read_from_a_yaml_config_with_a_literal_port_is_reported(tmp_path):
    script = """\
import os
import yaml
import torch.distributed as dist

cfg = yaml.safe_load(open("config.yaml"))
os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = str(cfg["dist"].master_port)
dist.init_process_group("nccl")
"""
    found = _rendezvous(tmp_path, "yaml", {"train.py": script, "config.yaml": "dist:\n  master_port: 12355\n"})
    assert [line for line, _ in found] == [7]
    assert "os.environ['MASTER_PORT'] is the configuration's 'master_port', which config.yaml sets to the literal '12355'" in found[0][1]


def test_a_key_another_file_of_the_project_sets_is_not_the_configurations(tmp_path):
    launcher = 'import socket\n\ndef launch(cfg):\n    cfg.dist_url = "tcp://localhost:%d" % free_port()\n'
    assert _rendezvous(tmp_path, "launcher", {"train.py": _HIFIGAN.format(rewrite=""), "launch.py": launcher,
                                              "config_v1.json": _config("tcp://localhost:54321")}) == []


def test_a_launch_command_built_with_a_literal_port_is_reported():
    from paratrain.diagnostics.check import check_source

    source = """\
import subprocess
import sys

def launch(world_size, main_file, port):
    fixed = [sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node", str(world_size),
             "--master_port", str(29961), main_file]
    joined = ["torchrun", "--master-port=29500", main_file]
    chosen = [sys.executable, "-m", "torch.distributed.launch", "--master_port", str(port), main_file]
    subprocess.call(fixed)
"""
    found = [(f.line, f.rule) for f in check_source(source) if f.rule == "hardcoded-rendezvous"]
    assert found == [(6, "hardcoded-rendezvous"), (7, "hardcoded-rendezvous")]
