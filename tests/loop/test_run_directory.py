"""What paratrain guarantees about a run directory, through the real CLI on two real processes.

* the best checkpoint is the best, carries its metrics, and is never rotated away;
* one writer per run directory (a second run is refused, naming the first; a dead one's lock is taken over);
* checkpoints that all fail verification stop the run (named, nothing deleted); a damaged newer one is set aside;
* a crash before the first checkpoint does not lock the directory: the same command runs again.

Each of these failed on the release before the run-directory guarantees (the best checkpoint lacked its
metrics and was deleted; a second run wrote into the first's directory; damaged checkpoints were
deleted after a silent fresh start; a rerun after an early crash was refused because of failure.json).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from paratrain.checkpoint import catalog
from tests.support import clean_env, paratrain_cmd


def _train(cli_env, out: Path, *words: str) -> subprocess.CompletedProcess:
    command = paratrain_cmd("train", "digits", "--nproc-per-node", "2", "--out", str(out), "--no-tensorboard", *words)
    return subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=300, check=False)


def _start_until_workers_load(cli_env, out: Path, *words: str) -> subprocess.Popen:
    """Start the command in a session of its own; return once its workers are loading their data."""
    command = paratrain_cmd("train", "digits", "--nproc-per-node", "2", "--out", str(out), "--no-tensorboard", *words)
    process = subprocess.Popen(command, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / "logs" / "rank1.log").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            _kill_session(process)
            raise AssertionError(f"the workers did not start:\n{process.communicate()[0]}")
        time.sleep(0.01)
    return process


def _kill_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _records(out: Path, event: str) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == event]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_a_save_on_an_evaluation_step_carries_its_metrics_and_the_best_survives_a_resume(tmp_path, cli_env):
    out = tmp_path / "run"
    # Every --save-every save falls on an epoch end (45 steps an epoch), where the evaluation is due.
    first = _train(cli_env, out, "--max-steps", "90", "--save-every", "45", "--keep-last", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    for path, manifest in catalog.complete(out / "checkpoints"):
        assert set(manifest.metrics) >= {"accuracy", "loss"}, f"{path.name} was saved without its evaluation"
    summary = _summary(out)
    assert Path(summary["best_checkpoint"]).name == f"step-{summary['best_step']:06d}"

    second = _train(cli_env, out, "--max-steps", "180", "--save-every", "45", "--keep-last", "1")
    assert second.returncode == 0, second.stdout + second.stderr
    summary = _summary(out)
    best = Path(summary["best_checkpoint"])
    assert best.name == f"step-{summary['best_step']:06d}" and best.is_dir()  # reported, kept and named alike
    evals = {r["step"]: r["accuracy"] for r in _records(out, "eval")}
    assert summary["best_metrics"]["accuracy"] == max(evals.values())


def test_a_second_run_into_the_same_directory_is_refused_and_a_killed_runs_lock_is_taken_over(tmp_path, cli_env):
    out = tmp_path / "run"
    first = _start_until_workers_load(cli_env, out, "--epochs", "40")
    try:
        second = _train(cli_env, out, "--epochs", "40")
        assert second.returncode == 1
        assert f"{out} is in use by another paratrain run (pid {first.pid} on " in second.stderr
        assert not (out / "failure.json").exists()  # the refused run wrote nothing there
        assert len(_records(out, "attempt")) == 1
    finally:
        _kill_session(first)  # the whole job dies without releasing anything
        first.communicate(timeout=60)

    third = _train(cli_env, out, "--epochs", "1", "--max-steps", "2")
    assert third.returncode == 0, third.stdout + third.stderr
    assert f"the previous run (pid {first.pid} on " in third.stderr and "takes it over" in third.stderr
    assert not (out / ".paratrain-lock").exists()  # released at the end


@pytest.fixture(scope="module")
def crashed_then_rerun(tmp_path_factory):
    """A run whose worker was killed before the first checkpoint, then the same command again (2 epochs: it
    leaves the checkpoints of steps 45 and 90, which the damaged-checkpoint test starts from)."""
    out = tmp_path_factory.mktemp("crashed") / "run"
    env = clean_env()
    first = _start_until_workers_load(env, out, "--epochs", "2")
    try:
        workers = [p for p in psutil.Process(first.pid).children(recursive=True) if "paratrain.cli.workers.train" in " ".join(p.cmdline())]
        assert workers, "no worker found"
        workers[-1].kill()  # the OOM killer, before any checkpoint exists
        output, _ = first.communicate(timeout=120)
    finally:
        _kill_session(first)
    crashed = {"returncode": first.returncode, "failure.json": (out / "failure.json").exists(),
               "checkpoints": catalog.complete(out / "checkpoints")}
    rerun = _train(env, out, "--epochs", "2")
    return out, crashed, output, rerun


def test_a_crash_before_the_first_checkpoint_does_not_lock_the_directory(crashed_then_rerun):
    out, crashed, output, rerun = crashed_then_rerun
    assert crashed["returncode"] != 0 and crashed["failure.json"], output
    assert not crashed["checkpoints"]

    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert not (out / "failure.json").exists()  # kept, per attempt, out of the way
    kept = list((out / "failures").glob("failure-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["summary"]
    attempts = _records(out, "attempt")
    assert [a["attempt"] for a in attempts] == [1, 2]  # the first attempt was marked before it crashed
    assert attempts[1]["previous_attempt"].startswith("failed: ") and attempts[1]["previous_failure_report"] == str(kept[0])


def test_checkpoints_that_are_all_damaged_stop_the_run_and_a_damaged_newer_one_is_set_aside(tmp_path, cli_env,
                                                                                            crashed_then_rerun):
    out = tmp_path / "run"  # a copy of a finished 2-epoch run (the crashed run's rerun)
    finished, _, _, rerun = crashed_then_rerun
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    shutil.copytree(finished, out, symlinks=True)
    names = [p.name for p, _ in catalog.complete(out / "checkpoints")]
    assert names == ["step-000045", "step-000090"]
    subprocess.run(["cp", "-a", str(out / "checkpoints" / "step-000045"), str(tmp_path / "copy-45")], check=True)
    for name in names:
        (out / "checkpoints" / name / "model.safetensors").write_bytes(b"truncated")

    refused = _train(cli_env, out, "--epochs", "3")
    assert refused.returncode == 1
    assert "holds 2 checkpoint(s) and none is intact" in refused.stderr and "nothing was deleted" in refused.stderr
    assert [p.name for p, _ in catalog.complete(out / "checkpoints")] == names  # both still there
    after_refusal = (out / "metrics.jsonl").read_text().splitlines()[-1]
    assert json.loads(after_refusal)["event"] == "attempt"  # marked, then refused: no silent fresh start

    # The older one restored: the run resumes from it; the damaged newer one is moved aside, not deleted.
    subprocess.run(["rm", "-r", str(out / "checkpoints" / "step-000045")], check=True)
    (tmp_path / "copy-45").rename(out / "checkpoints" / "step-000045")
    resumed = _train(cli_env, out, "--epochs", "3")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "paratrain: warning: checkpoint step-000090 is damaged" in resumed.stderr  # one line, no source line
    assert "warnings.warn" not in resumed.stderr
    assert (out / "checkpoints" / "damaged" / "step-000090" / "model.safetensors").read_bytes() == b"truncated"
    assert _summary(out)["resumed_from_step"] == 45


def test_the_latest_attempts_curve_has_no_zig_zag():
    from paratrain.loop.run_log import latest_attempt

    records = [{"event": "attempt", "step": 0}, *({"event": "train", "step": s} for s in (10, 20, 30)),
               {"event": "attempt", "step": 0}, {"event": "resume", "step": 20}, *({"event": "train", "step": s} for s in (30, 40)),
               {"event": "attempt", "step": 0}, {"event": "train", "step": 10}]  # a fresh start (no checkpoint)
    steps = [r["step"] for r in latest_attempt(records) if r["event"] == "train"]
    assert steps == [10]
    assert [r["step"] for r in latest_attempt(records[:-2]) if r["event"] == "train"] == [10, 20, 30, 40]


def test_ctrl_c_at_start_up_is_one_line_per_process_and_the_rerun_trains(tmp_path, cli_env):
    # Before: a KeyboardInterrupt traceback from inside an import, per rank.
    out = tmp_path / "run"
    first = _start_until_workers_load(cli_env, out, "--max-steps", "20")  # loading data: importing sklearn
    try:
        os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the launcher and every worker
        output, _ = first.communicate(timeout=120)
    finally:
        _kill_session(first)
    assert first.returncode == 130, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "interrupted by SIGINT (Ctrl-C)" in output.splitlines()[-1]
    rerun = _train(cli_env, out, "--max-steps", "20")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
