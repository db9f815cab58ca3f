"""Hostile inputs across the CLI and the API: each one line naming the fix, a non-zero exit, nothing written.

The CLI cases start at once (module fixture) in a scratch directory whose contents are
compared before and after; the API cases run in this process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import paratrain as pt
from paratrain.errors import CheckpointError, ConfigError, DataError, ParatrainError
from tests.launch.processes import finish
from tests.support import EXAMPLES, clean_env, free_port, paratrain_cmd

ALLREDUCE = str(EXAMPLES / "allreduce.py")
WAVE = 6

# name: (argv, expected exit code, fragment of the one stderr line)
CLI_CASES = {
    "out under /proc": (["train", "digits", "--out", "/proc/x"], 2, "cannot create --out /proc/x (No such file or directory); pick a writable directory"),
    "out under a device": (["train", "digits", "--out", "/dev/null/x"], 2, "cannot create --out /dev/null/x (Not a directory)"),
    "out is a file": (["train", "digits", "--out", "notes.txt"], 2, "--out notes.txt is a file; give a directory"),
    "unknown task": (["train", "cifar", "--out", "runs/c"], 2, "cifar"),
    "negative stall timeout": (["train", "digits", "--stall-timeout", "-5"], 2, "--stall-timeout must be a finite number of seconds, or 0 to turn the watchdog off, got -5.0"),
    "zero save minutes": (["train", "digits", "--save-every-minutes", "0"], 2, "--save-every-minutes must be a positive number"),
    "negative restarts": (["train", "digits", "--max-restarts", "-1", "--nproc-per-node", "2"], 2, "--max-restarts -1 must be 0 or more"),
    "missing data": (["train", "mnist", "--data", "no-such-dir"], 2, "--data no-such-dir is not a directory"),
    "option the task ignores": (["train", "digits", "--model-path", "bert"], 2, "task 'digits' does not use --model-path bert; drop it"),
    "bad strategy": (["train", "digits", "--strategy", "horovod2"], 2, "horovod2"),
    "bad precision": (["train", "digits", "--precision", "fp8"], 2, "fp8"),
    "rank filter outside": (["run", "--nproc-per-node", "2", "--local-ranks-filter", "5", ALLREDUCE], 2,
                            "--local-ranks-filter 5 names local ranks outside 0..1"),
    "rank filter not numbers": (["run", "--local-ranks-filter", "a,b", ALLREDUCE], 2, "is not a comma-separated list of local ranks"),
    "output mode": (["run", "--output", "fancy", ALLREDUCE], 2, "--output 'fancy' is not one of auto, prefixed, raw"),
    "negative stall timeout for run": (["run", "--stall-timeout", "-2", ALLREDUCE], 2,
                                       "--stall-timeout -2 must be a finite number of seconds, or 0 to turn the watchdog off"),
    "port out of range": (["run", "--master-port", "70000", ALLREDUCE], 2, "--master-port 70000 is not a TCP port (1-65535)"),
    "world size zero": (["run", "--nproc-per-node", "0", ALLREDUCE], 2, "--nproc-per-node 0 must be at least 1"),
    "node rank outside": (["run", "--nnodes", "2", "--node-rank", "3", "--master-addr", "127.0.0.1", ALLREDUCE], 2,
                          "--node-rank 3 is outside --nnodes 2"),
    "missing checkpoint": (["ckpt", "inspect", "no-such-run"], 1, "no checkpoint at no-such-run: the path does not exist"),
    "foreign checkpoint": (["ckpt", "export", "notes.txt", "--out", "w.safetensors"], 1, "is not a readable safetensors file"),
    "predict on a file": (["predict", "notes.txt", "hello"], 2, "holds no task.json; pass the --out directory"),
    "doctor port": (["doctor", "--nproc-per-node", "2", "--master-port", "99999"], 2, "--master-port 99999 is not a TCP port"),
    "doctor master": (["doctor", "--nnodes", "2", "--master-addr", "no-such-host.invalid"], 2,
                      "master address 'no-such-host.invalid' does not resolve"),
    "doctor world size": (["doctor", "--nproc-per-node", "x"], 2, "--nproc-per-node 'x' is neither a number nor 'auto'"),
    # The run-directory battery: each of these was accepted before, and failed later or silently.
    "lr nan": (["train", "digits", "--lr", "nan"], 2, "--lr must be a positive number (finite), got nan"),
    "lr inf": (["train", "digits", "--lr", "inf"], 2, "--lr must be a positive number (finite), got inf"),
    "weight decay nan": (["train", "digits", "--weight-decay", "nan"], 2, "--weight-decay must be a number >= 0 (finite), got nan"),
    "nonfinite policy": (["train", "digits", "--on-nonfinite", "ignore"], 2, "--on-nonfinite ignore is not one of stop, skip"),
    "max len 1": (["train", "text-cls", "--max-len", "1"], 2, "--max-len 1 leaves no room for text"),
    "predict empty text": (["predict", "notes.txt", ""], 2, "input 1 is empty"),
    "predict empty file": (["predict", "--file", "empty.txt", "notes.txt"], 2, "--file empty.txt holds no text"),
    "check empty folder": (["check", "folder"], 2, "folder is a folder with no .py file in it"),
}


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _checkpoint_files(root: Path) -> dict[str, bytes]:
    """The tree without the goodput ledger, which records every attempt (the failed save's too)."""
    return {name: data for name, data in _tree(root).items() if not name.endswith("goodput.jsonl")}


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("hostile")
    (scratch / "notes.txt").write_text("not a checkpoint\n")
    (scratch / "empty.txt").write_text("\n\n")
    (scratch / "folder").mkdir()
    before = _tree(scratch)
    env = clean_env()
    names, results = list(CLI_CASES), {}
    for wave in range(0, len(names), WAVE):  # a few at a time: each one imports torch
        batch = names[wave:wave + WAVE]
        procs = [_start_in(scratch, CLI_CASES[name][0], env) for name in batch]
        results.update(zip(batch, finish(procs)))
    return results, before, _tree(scratch)


def _start_in(cwd: Path, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(paratrain_cmd(*argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("name", list(CLI_CASES))
def test_cli_refuses_in_one_line(cli_results, name):
    results, _, _ = cli_results
    argv, code, fragment = CLI_CASES[name]
    result = results[name]
    assert result.returncode == code, result.stderr
    assert len(result.stderr_lines) == 1, result.stderr  # one line, no traceback
    line = result.stderr_lines[0]
    assert line.startswith(f"paratrain {argv[0]}: error: ") and fragment in line, line


def test_cli_refusals_wrote_and_overwrote_nothing(cli_results):
    _, before, after = cli_results
    assert after == before


# ---- the API -------------------------------------------------------------------------------
def _api_cases(tmp_path):
    from paratrain.diagnostics.link_probe import measure_allreduce
    from paratrain.env.detect import detect
    from paratrain.diagnostics.watchdog import Watchdog
    from paratrain.loop.config import FitConfig

    afile = tmp_path / "afile"
    afile.write_text("x")
    rt = pt.Runtime(strategy="single", seed=0)
    model = torch.nn.Linear(2, 2)
    return {
        "unknown strategy": (lambda: pt.Runtime(strategy="bogus"), ConfigError, "bogus"),
        "unknown precision": (lambda: pt.Runtime(precision="fp8"), ConfigError, "fp8"),
        "stall timeout as text": (lambda: Watchdog("10"), ConfigError, "stall_timeout must be a positive number of seconds"),
        "watchdog timeout zero": (lambda: rt.watchdog(0), ConfigError, "stall_timeout must be a positive number"),
        "negative fit stall timeout": (lambda: FitConfig(stall_timeout=-1), ConfigError, "stall_timeout must be a finite number of seconds, or 0 to turn the watchdog off"),
        "save minutes as text": (lambda: FitConfig(save_every_minutes="5"), ConfigError, "save_every_minutes must be a positive number"),
        "batch size zero": (lambda: rt.loader(torch.utils.data.TensorDataset(torch.zeros(4, 1)), batch_size=0), DataError,
                            "batch_size must be a positive integer"),
        "checkpoint dir is a file": (lambda: pt.Checkpointer(rt, afile, model=model), ConfigError, "is a file; pass a directory path"),
        "nothing to checkpoint": (lambda: pt.Checkpointer(rt, tmp_path / "c"), ConfigError, "got nothing to save"),
        "corrupt checkpoint": (lambda: pt.Checkpointer(rt, tmp_path / "c2", model=model).load(afile), CheckpointError, ""),
        "unknown fit task": (lambda: pt.fit("imagenet"), ConfigError, "imagenet"),
        "probe sizes": (lambda: measure_allreduce(sizes_bytes=[]), ConfigError, "sizes_bytes"),
        "rank outside world size": (lambda: detect({"RANK": "5", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}),
                                    ConfigError, "needs its own RANK from 0 to WORLD_SIZE-1; let `paratrain run`"),
    }, rt


API_NAMES = ["unknown strategy", "unknown precision", "stall timeout as text", "watchdog timeout zero",
             "negative fit stall timeout", "save minutes as text", "batch size zero", "checkpoint dir is a file",
             "nothing to checkpoint", "corrupt checkpoint", "unknown fit task", "probe sizes", "rank outside world size"]


def test_api_refuses_in_one_line(tmp_path):
    cases, rt = _api_cases(tmp_path)
    assert sorted(cases) == sorted(API_NAMES)
    before = _tree(tmp_path)
    for name, (call, kind, fragment) in cases.items():
        with pytest.raises(kind) as caught:
            call()
        message = str(caught.value)
        assert isinstance(caught.value, ParatrainError) and "\n" not in message and fragment in message, (name, message)
    assert _tree(tmp_path) == before
    rt.close()


def test_a_full_disk_fails_the_save_in_one_line_and_keeps_the_previous_checkpoint(tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tiny tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount tmpfs here")
    try:
        rt = pt.Runtime(strategy="single", seed=0)
        small, big = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        ckpt = pt.Checkpointer(rt, disk / "ckpt", model=small)
        first = ckpt.save(step=1)
        kept = _checkpoint_files(disk)
        huge = pt.Checkpointer(rt, disk / "ckpt", model=torch.nn.Linear(256, 256))  # 256 KiB > the disk
        with pytest.raises(CheckpointError) as caught:
            huge.save(step=2)
        assert "\n" not in str(caught.value) and "not enough disk space for a checkpoint" in str(caught.value)
        assert _checkpoint_files(disk) == kept and first.exists()  # the half-written one removed, the first untouched
        del big
        huge.close()
        ckpt.close()
        rt.close()
    finally:  # lazy: a failed write's traceback may still hold a file open on it
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


LONE_RANK = """
import paratrain as pt
pt.Runtime(timeout=3)
"""


def test_a_rank_started_alone_says_from_its_own_side_what_it_waited_for(tmp_path):
    # Before: silent for twice the timeout, then a 65-line chained traceback telling rank 0 itself
    # to "check that rank 0 runs".
    script = tmp_path / "lone.py"
    script.write_text(LONE_RANK)
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, str(script)], env=clean_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0",
                                                                            MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0,)]
    port_b = str(free_port())
    procs.append(subprocess.Popen([sys.executable, str(script)], env=clean_env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="0",
                                                                               MASTER_ADDR="127.0.0.1", MASTER_PORT=port_b),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    (zero, one) = [p.communicate(timeout=120)[1] for p in procs]
    last_zero, last_one = zero.strip().splitlines()[-1], one.strip().splitlines()[-1]
    assert "rank 0 could not join the process group" in last_zero and "rank 0 hosts the rendezvous there" in last_zero
    assert "check that rank 0 runs" not in last_zero
    assert "rank 1 could not join the process group" in last_one and "check that rank 0 runs there" in last_one
    for text in (zero, one):
        assert "During handling of the above exception" not in text and "direct cause" not in text  # no chained C++ wall


