"""`paratrain train` through the real CLI on two real processes: accuracy, kill and resume, mnist, text-cls."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import paratrain_cmd
from tests.tasks.idx_files import write_mnist


def _events(out: Path, kind: str) -> list[dict]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line for line in lines if line["event"] == kind]


def _train(cli_env, *words: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(paratrain_cmd("train", *words), env=cli_env, capture_output=True, text=True, timeout=timeout, check=False)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the launcher (torch elastic stops its workers), then make sure the group is gone."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_digits_on_two_processes_is_killed_resumes_from_its_checkpoint_and_reaches_95_percent(tmp_path, cli_env):
    out = tmp_path / "digits"
    command = paratrain_cmd("train", "digits", "--nproc-per-node", "2", "--out", str(out), "--no-tensorboard")
    first = subprocess.Popen(command, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        while not _events(out, "checkpoint"):  # the end of epoch 1 (45 steps)
            assert first.poll() is None, f"the run ended before its first checkpoint:\n{first.stdout.read()}"
            time.sleep(0.05)
    finally:
        _stop(first)
    saved = [event["step"] for event in _events(out, "checkpoint")]
    assert not (out / "summary.json").exists(), "the first run finished before it was killed"

    second = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    summary = json.loads((out / "summary.json").read_text())
    resumed = summary["resumed_from_step"]
    assert saved[0] <= resumed < summary["steps"]  # the latest complete checkpoint, not step 0
    assert f"resuming from step {resumed}" in second.stdout
    assert summary["steps"] == 6 * 45 and summary["world_size"] == 2  # the recipe: 6 epochs of 1438 / (2 × 16)
    assert summary["best_metrics"]["accuracy"] >= 0.95
    assert [event["step"] for event in _events(out, "resume")] == [resumed]
    assert (out / "logs" / "rank0.log").exists() and (out / "logs" / "rank1.log").exists()
    assert "precision    recall" in second.stdout  # the dev report


def test_mnist_on_two_processes_reads_raw_and_gzipped_idx_files(tmp_path, cli_env):
    data = write_mnist(tmp_path / "mnist", train=512, test=96, gz_train=False, gz_test=True)
    out = tmp_path / "out"
    result = _train(cli_env, "mnist", "--data", str(data), "--nproc-per-node", "2", "--out", str(out),
                    "--epochs", "3", "--batch-size", "16", "--lr", "0.05", "--no-tensorboard",
                    "--log-dir", str(tmp_path / "logs"), "--threads-per-proc", "1")  # passed on to the launcher
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(list((tmp_path / "logs").rglob("stdout.log"))) == 2  # one per worker, where --log-dir said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["best_metrics"]["samples"] == 96
    assert summary["best_metrics"]["accuracy"] > 0.5  # ten classes: chance is 0.1


def test_every_process_flag_reaches_the_launcher_as_run_reads_it():
    from paratrain.cli.main import build_parser
    from paratrain.cli.train_cmd import RUN_FLAGS, run_words
    from paratrain.launch.config import LaunchConfig

    given = {"--nnodes": "1:2", "--node-rank": "0", "--master-addr": "127.0.0.1", "--master-port": "29555",
             "--max-restarts": "2", "--threads-per-proc": "1", "--cpu-binding": "none", "--rdzv-backend": "c10d", "--rdzv-endpoint": "127.0.0.1:29556",
             "--rdzv-id": "job7", "--rdzv-timeout": "90", "--rdzv-last-call": "5", "--backend": "gloo",
             "--log-dir": "logs", "--output": "raw", "--local-ranks-filter": "0"}
    switches = ("--warm-workers",)  # flags without a value
    assert sorted([*given, *switches]) == sorted(RUN_FLAGS)
    train = build_parser().parse_args(["train", "digits", "--nproc-per-node", "2", *[w for kv in given.items() for w in kv],
                                       *switches])
    config = LaunchConfig.from_args(build_parser().parse_args([*run_words(train), "-m", "paratrain.cli.workers.train"]), environ={})
    assert (config.min_nodes, config.max_nodes, config.max_restarts, config.threads_per_proc) == (1, 2, 2, 1)
    assert (config.rdzv_backend, config.rdzv_id, config.rdzv_timeout, config.rdzv_last_call) == ("c10d", "job7", 90, 5)
    assert (config.backend, config.log_dir, config.output, config.local_ranks_filter) == ("gloo", "logs", "raw", (0,))
    assert config.cpu_binding == "none" and config.warm_workers


def test_same_command_resumes_and_fresh_moves_the_old_run_aside(tmp_path, capsys):
    """One process: `paratrain train` runs in this process (no launcher)."""
    from paratrain.cli.main import main

    out = tmp_path / "run"
    words = ["train", "digits", "--out", str(out), "--limit-train", "64", "--limit-eval", "32", "--batch-size", "16",
             "--no-tensorboard"]
    assert main([*words, "--max-steps", "4"]) == 0
    assert main([*words, "--max-steps", "6"]) == 0
    assert "resuming from step 4" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["resumed_from_step"] == 4
    assert main([*words, "--max-steps", "2", "--fresh"]) == 0
    captured = capsys.readouterr()
    assert f"moved the previous run in {out} to {out}.old-" in captured.err
    assert "starting from step 0" in captured.out
    (old,) = tmp_path.glob("run.old-*")
    assert json.loads((old / "summary.json").read_text())["steps"] == 6  # kept, not deleted
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


def test_digits_with_deepspeed_zero3_clips_in_the_engine_and_resumes(tmp_path, cli_env):
    pytest.importorskip("deepspeed", reason="strategy 'deepspeed' needs: pip install 'paratrain[deepspeed]'")
    out = tmp_path / "zero3"
    words = ("digits", "--nproc-per-node", "2", "--strategy", "deepspeed", "--zero-stage", "3", "--clip-norm", "1.0",
             "--out", str(out), "--no-tensorboard")
    first = _train(cli_env, *words, "--max-steps", "20")
    assert first.returncode == 0, first.stdout + first.stderr
    second = _train(cli_env, *words, "--max-steps", "40")
    assert second.returncode == 0, second.stdout + second.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from_step"] == 20 and summary["steps"] == 40
    manifest = json.loads((out / "checkpoints" / "step-000040" / "manifest.json").read_text())
    assert manifest["run"]["strategy"] == "deepspeed"
