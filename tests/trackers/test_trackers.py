"""Experiment trackers for real: an own loop's rt.log to CSV, an MLflow file store and W&B offline files, resumed
over its logged steps; and `paratrain train` on 2 processes logging to a real `mlflow server`, W&B offline and CSV,
one worker SIGKILLed and restarted by the elastic agent: one run in each tracker, each step once."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from paratrain.loop.run_log import latest_attempt, read_records
from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, free_port, paratrain_cmd
from tests.trackers import wandb_files

pytest.importorskip("mlflow")
pytest.importorskip("wandb")


def _csv_steps(path: Path, column: str) -> dict[int, float]:
    with open(path, newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get(column)]
    steps = [int(row["step"]) for row in rows]
    assert len(steps) == len(set(steps)), f"a step twice in {path}: {steps}"
    return {int(row["step"]): float(row[column]) for row in rows}


def _wandb_steps(out: Path, column: str) -> tuple[str, list[int]]:
    runs = wandb_files.runs(out / "wandb")
    assert len(runs) == 1, f"W&B runs: {list(runs)}"
    (run_id, rows), = runs.items()
    return run_id, [row["_step"] for row in rows if column in row]


def test_own_loop_resumed_sends_each_step_once_and_a_missing_tracker_is_one_line(tmp_path, monkeypatch, capsys):
    import mlflow

    import paratrain as pt
    from paratrain.trackers import TRACKERS, Tracker

    store = f"file://{tmp_path / 'mlruns'}"
    for name, value in {"MLFLOW_TRACKING_URI": store, "MLFLOW_ALLOW_FILE_STORE": "true", "WANDB_MODE": "offline",
                        "MLFLOW_EXPERIMENT_NAME": "own-loop", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                        "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    # Attempt 1 logs steps 1-6 and dies; attempt 2 resumed from step 3 and logs 4-8 again with other values.
    for attempt, steps in ((1, range(1, 7)), (2, range(4, 9))):
        with pt.Runtime() as rt:
            trackers = rt.log_with("csv,mlflow,wandb", out, config={"lr": 0.1})
            for step in steps:
                rt.log({"loss": 100 * attempt + step}, step)
            if attempt == 2:
                trackers.summary({"best_loss": 204.0}, 8)
    said = capsys.readouterr().err
    assert said.count("logging to csv, mlflow (run") == 2, said

    # CSV rewinds: the redone steps replace the failed attempt's.
    assert _csv_steps(out / "metrics.csv", "loss") == {1: 101, 2: 102, 3: 103, **{s: 200 + s for s in range(4, 9)}}
    # MLflow (append-only): one run, each step once; the steps attempt 1 had sent are not sent again.
    client = mlflow.tracking.MlflowClient(store)
    experiment = client.get_experiment_by_name("own-loop")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == json.loads((out / "trackers.json").read_text())["mlflow"]["id"]
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "loss")}
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss")) == list(range(1, 9))
    assert history == {**{s: 100 + s for s in range(1, 7)}, 7: 207, 8: 208}
    assert run.data.params["lr"] == "0.1" and run.data.params["world_size"] == "1"
    assert run.data.metrics["summary/best_loss"] == 204.0 and run.info.status == "FINISHED"
    # W&B offline: both attempts' files carry the same run id, each step once.
    run_id, steps = _wandb_steps(out, "loss")
    assert run_id == json.loads((out / "trackers.json").read_text())["wandb"]["id"] and steps == list(range(1, 9))

    # A package that is not installed and a server that does not answer: one line each, the loop goes on.
    class Absent(Tracker):
        name, package, extra = "absent-for-test", "paratrain_no_such_module", "absent"

    TRACKERS[Absent.name] = Absent
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    try:
        with pt.Runtime() as rt:
            rt.log_with(["absent-for-test", "mlflow"], tmp_path / "unreachable")
            rt.log({"loss": 1.0}, 1)
    finally:
        del TRACKERS[Absent.name]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2, lines
    assert "absent-for-test is not installed (pip install 'paratrain[absent]')" in lines[0]
    assert "mlflow could not start (URLError" in lines[1] and "training goes on without it" in lines[1]


@pytest.fixture
def mlflow_server(tmp_path):
    """A real `mlflow server` on 127.0.0.1 (file-store backend: it starts in seconds), its URI."""
    port = free_port()
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"}
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1", "--backend-store-uri", f"file://{tmp_path / 'server-store'}",
                               "--artifacts-destination", str(tmp_path / "server-artifacts")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "mlflow server did not start"
                time.sleep(0.5)
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


STEPS = 14


def test_train_killed_and_restarted_is_one_tracker_run_with_each_step_once(tmp_path, cli_env, mlflow_server):
    import mlflow

    out = tmp_path / "run"
    env = {**cli_env, "MLFLOW_TRACKING_URI": mlflow_server, "MLFLOW_EXPERIMENT_NAME": "killed", "WANDB_MODE": "offline"}
    argv = paratrain_cmd("train", "digits", "--nproc-per-node", "2", "--max-restarts", "1", "--limit-train", "256",
                         "--limit-eval", "64", "--max-steps", str(STEPS), "--log-every", "1", "--save-every", "4",
                         "--no-eval-per-epoch", "--eval-every", "8", "--log-with", "csv,mlflow,wandb", "--out", str(out))
    launcher = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # SIGKILL rank 1 once a step after a checkpoint is logged: the restart redoes the steps after it, and
        # rank 0 (which sends to the trackers) is stopped by the launcher and closes them. (W&B holds nothing
        # of a rank 0 killed with SIGKILL: tests/trackers/test_hub.py.)
        while not [r for r in read_records(out / "metrics.jsonl") if r.get("event") == "train" and r["step"] == 6]:
            assert launcher.poll() is None, launcher.communicate()[0]
            time.sleep(0.02)
        workers = [p for p in psutil.Process(launcher.pid).children() if p.status() != psutil.STATUS_ZOMBIE]
        (rank1,) = [p for p in workers if p.environ().get("RANK") == "1"]
        rank1.send_signal(signal.SIGKILL)
        output, _ = launcher.communicate(timeout=HANG_GUARD_S)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, output
    records = read_records(out / "metrics.jsonl")
    resumed = [r["step"] for r in records if r.get("event") == "resume"]
    redone = [r["step"] for r in records if r.get("event") == "train"]
    assert len(resumed) == 1 and len(redone) > len(set(redone)), output  # the failed attempt's steps were redone
    ids = json.loads((out / "trackers.json").read_text())

    client = mlflow.tracking.MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("killed").experiment_id])
    assert run.info.run_id == ids["mlflow"]["id"] and run.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "train/loss")) == list(range(1, STEPS + 1))
    assert [m.step for m in client.get_metric_history(run.info.run_id, "eval/accuracy")] == [8, 14]
    params = run.data.params
    assert (params["task"], params["strategy"], params["world_size"], params["log_with"]) == ("digits", "ddp", "2", "csv,mlflow,wandb")
    assert run.data.metrics["summary/steps"] == STEPS
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["weights.safetensors"]

    run_id, steps = _wandb_steps(out, "train/loss")
    assert run_id == ids["wandb"]["id"] and steps == list(range(1, STEPS + 1)), output
    assert wandb_files.config(out / "wandb")["world_size"] == 2

    latest = {r["step"]: r["loss"] for r in latest_attempt(records) if r.get("event") == "train"}
    assert _csv_steps(out / "metrics.csv", "train/loss") == pytest.approx(latest)  # the redone steps replaced
