"""paratrain check: the tutorials' scripts trigger their pitfalls; the converted examples come out clean."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from paratrain.diagnostics.check import check_file, check_source
from paratrain.errors import ConfigError
from tests.support import EXAMPLES, ROOT, clean_env, paratrain_cmd

SEEDS = Path(__file__).parent / "seed_scripts"

EXPECTED = {
    # its SyncBN conversion runs only with --sync_bn, a switch off unless passed: BatchNorm in DDP by default
    "seed001_apex_launch.py": {"deprecated-launcher", "sampler-not-passed", "padded-eval-sampler",
                               "wrapped-state-dict", "save-on-every-rank", "local-rank-argument",
                               "batchnorm-without-syncbn"},
    "seed002_dataparallel.py": {"model-before-seed", "data-parallel", "wrapped-state-dict"},
    # its --local-rank flag is never read (mp.spawn hands the rank to main_worker): harmless; the spawn
    # index it names local_rank is what init_process_group takes as the rank, so the save under
    # `local_rank == 0` runs on one process
    "seed003_mp_spawn.py": {"hardcoded-rendezvous", "padded-eval-sampler", "wrapped-state-dict"},
    "seed003_horovod.py": {"no-set-epoch", "padded-eval-sampler", "print-on-every-rank"},
    "seed004_tcp_two_machines.py": {"hardcoded-rendezvous", "model-before-seed", "sampler-not-passed",
                                    "print-on-every-rank"},
}


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_each_seed_script_triggers_its_pitfalls(script):
    assert {finding.rule for finding in check_file(SEEDS / script)} == EXPECTED[script]


def test_seed_004_sampler_finding_points_at_both_lines():
    findings = check_file(SEEDS / "seed004_tcp_two_machines.py")
    sampler = next(f for f in findings if f.rule == "sampler-not-passed")
    lines = (SEEDS / "seed004_tcp_two_machines.py").read_text().splitlines()
    assert "DistributedSampler(train_dataset)" in lines[sampler.line - 1]
    loader_line = next(i for i, line in enumerate(lines, 1) if "train_loader = " in line)
    assert f"the DataLoader at line {loader_line} reads the whole dataset on every rank" in sampler.problem
    assert "sampler=train_sampler" in sampler.fix
    rendezvous = [f for f in findings if f.rule == "hardcoded-rendezvous"]
    assert "'tcp://192.168.10.235:23456'" in rendezvous[0].problem and "world_size=2" in rendezvous[1].problem


def test_local_rank_finding_tells_default_from_none():
    read = "torch.cuda.set_device(p.parse_args().local_rank)\n"
    with_default = check_source("import argparse\np = argparse.ArgumentParser()\np.add_argument('--local_rank', default=0)\n" + read)
    without = check_source("import argparse\np = argparse.ArgumentParser()\np.add_argument('--local-rank', type=int)\n" + read)
    assert "defaults to 0" in with_default[0].problem and "same device" in with_default[0].problem
    assert "has no default" in without[0].problem and "--legacy-local-rank" in without[0].fix


SMALL = '''\
import torch
from torch.utils.data import DataLoader, DistributedSampler
torch.distributed.init_process_group("gloo")
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
model = torch.nn.parallel.DistributedDataParallel(model)
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=8, shuffle=True, sampler=sampler)
for epoch in range(3):
    sampler.set_epoch(epoch)
    if torch.distributed.get_rank() == 0:
        torch.save(model.module.state_dict(), "m.pt")
        print("saved")
'''


def test_shuffle_beside_sampler_and_batchnorm_without_syncbn():
    findings = check_source(SMALL)
    assert [(f.line, f.rule) for f in findings] == [(4, "batchnorm-without-syncbn"), (7, "shuffle-with-sampler")]
    converted = SMALL.replace("model = torch.nn.parallel", "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\nmodel = torch.nn.parallel")
    assert [f.rule for f in check_source(converted)] == ["shuffle-with-sampler"]


def test_ignore_comments_silence_one_rule_or_all():
    line = 'loader = DataLoader(data, batch_size=8, shuffle=True, sampler=sampler)'
    assert check_source(SMALL.replace(line, line + "  # paratrain: ignore[shuffle-with-sampler]"))[-1].rule != "shuffle-with-sampler"
    assert len(check_source(SMALL.replace(line, line + "  # paratrain: ignore"))) == 1


def test_bad_input_is_one_line():
    with pytest.raises(ConfigError, match=r"^x.py:2: not valid Python"):
        check_source("import torch\ndef broken(:\n", "x.py")
    with pytest.raises(ConfigError, match="script 'nope.py' not found"):
        check_file("nope.py")


def test_cli_exit_codes_and_output(tmp_path):
    seed = subprocess.run(paratrain_cmd("check", str(SEEDS / "seed004_tcp_two_machines.py")), cwd=ROOT,
                          env=clean_env(), capture_output=True, text=True)
    assert seed.returncode == 1
    assert "seed004_tcp_two_machines.py:44: [sampler-not-passed] DistributedSampler `train_sampler`" in seed.stdout
    assert "    fix: DataLoader(train_dataset, ..., sampler=train_sampler)" in seed.stdout
    assert seed.stderr.strip() == "5 problem(s) found in 1 script(s)"
    examples = sorted(str(p) for p in (EXAMPLES / "migrate").glob("*.py"))
    assert len(examples) >= 8
    clean = subprocess.run(paratrain_cmd("check", "--json", *examples), cwd=ROOT, env=clean_env(),
                           capture_output=True, text=True)
    assert (clean.returncode, clean.stdout) == (0, ""), [json.loads(line) for line in clean.stdout.splitlines()]
    missing = subprocess.run(paratrain_cmd("check", str(tmp_path / "missing.py")), cwd=ROOT, env=clean_env(),
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "not found" in missing.stderr
