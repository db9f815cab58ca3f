"""``paratrain bench`` as a user runs it: from a folder of their own, with relative paths and the default
``--out``; a task of their own reading its files from ``--data``; and a bench that is killed takes its
methods with it."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time

import psutil
import pytest

from paratrain.tasks.task_ref import label
from tests.support import ROOT, clean_env, paratrain_cmd

# The commands docs/benchmarks.md shows, made small: the same paths and defaults, one method, fewer steps and samples.
# (Every method failed the same way: one of each launcher kind between the two commands.)
SMALL = ["--steps", "3", "--limit-train", "96", "--limit-eval", "32", "--repeats", "1", "--min-time", "0"]
ONE_METHOD = {"digits": "single", "text-cls": "ddp"}

CSV_TASK = '''
"""A user's task: two numbers per row in DATA/train.csv and DATA/dev.csv, the label last."""
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from paratrain.tasks.api import Recipe, Task
from paratrain.tasks.classification import METRICS, ClassificationEvaluator


def read(path):
    rows = [[float(x) for x in line.split(",")] for line in Path(path).read_text().splitlines() if line.strip()]
    values = torch.tensor(rows, dtype=torch.float32).reshape(-1, 3)
    return TensorDataset(values[:, :2], values[:, 2].long())


class CsvTask(Task):
    name = "csv"
    recipe = Recipe(batch_size=4, eval_batch_size=16, lr=0.05)
    metric_names = METRICS
    options_used = ("data",)

    def datasets(self):
        return read(Path(self.options.data) / "train.csv"), read(Path(self.options.data) / "dev.csv")

    def collate(self, samples):
        x, y = zip(*samples)
        return {"x": torch.stack(x), "labels": torch.stack(y)}

    def build_model(self):
        return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, model, batch):
        logits = model(batch["x"])
        return nn.functional.cross_entropy(logits, batch["labels"]), logits

    def evaluator(self):
        return ClassificationEvaluator(["neg", "pos"])


TASK = CsvTask
'''


def documented_bench_commands() -> list[list[str]]:
    """Each distinct ``paratrain bench --task`` command of docs/benchmarks.md (one shown twice is run once)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    commands = [tuple(shlex.split(line.split("#")[0])) for line in re.findall(r"^paratrain bench --task .*$", text, re.M)]
    assert commands, "docs/benchmarks.md shows no `paratrain bench --task` command"
    return [list(command) for command in dict.fromkeys(commands)]


def user_folder(tmp_path, train_rows: int = 40):
    """A folder as a user has it: their task file and a data folder beside it."""
    (tmp_path / "csv_task.py").write_text(CSV_TASK)
    data = tmp_path / "data"
    data.mkdir()
    rows = [f"{i % 7 / 7:.3f},{i % 5 / 5:.3f},{int(i % 7 / 7 + i % 5 / 5 > 0.9)}" for i in range(train_rows + 12)]
    (data / "train.csv").write_text("\n".join(rows[:train_rows]) + "\n")
    (data / "dev.csv").write_text("\n".join(rows[train_rows:]) + "\n")
    return tmp_path


@pytest.mark.parametrize("command", documented_bench_commands(), ids=lambda c: " ".join(c[2:4]))
def test_the_documented_bench_commands_work_from_a_scratch_folder(command, tmp_path):
    task = command[command.index("--task") + 1]
    method = ONE_METHOD.get(task, "ddp")
    proc = subprocess.run([*paratrain_cmd(*command[1:]), *SMALL, "--methods", method], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "runs" / f"bench-{task}" / "bench.json").read_text())
    assert [(row["method"], row["kind"]) for row in report["rows"]] == [(method, "measured")], proc.stdout


def test_a_user_task_with_relative_data_and_the_default_out_and_a_min_time(tmp_path):
    folder = user_folder(tmp_path)
    proc = subprocess.run(
        paratrain_cmd("bench", "--task", "csv_task.py:TASK", "--data", "data", "--methods", "single", "--steps", "3",
                      "--repeats", "1", "--min-time", "0.5"),
        cwd=folder, env=clean_env(), capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((folder / "runs" / "bench-csv_task-TASK" / "bench.json").read_text())
    assert [row["kind"] for row in report["rows"]] == ["measured"], proc.stdout
    assert report["rows"][0]["dev"]["samples"] == 12
    # 2 measured steps of a tiny model last milliseconds: every method took more, round 1 ran again.
    steps = report["settings"]["steps"]
    assert steps > 3 and report["settings"]["steps_asked"] == 3, proc.stderr
    for row in report["rows"]:
        assert len(row["runs"]) == 1 and len(row["figures"]["step_losses"]) == steps
    assert f"every method takes {steps} steps, round 1 again" in proc.stderr


def test_two_user_tasks_of_one_name_get_their_own_default_folders():
    assert label("a/text_task.py:TASK") != label("b/image_task.py:TASK")
    assert label("examples.my_task:TASK") == "my_task-TASK" and label("digits") == "digits"


def test_an_empty_training_set_is_refused_before_any_method_starts(tmp_path):
    folder = user_folder(tmp_path, train_rows=0)
    proc = subprocess.run(
        paratrain_cmd("bench", "--task", "csv_task.py:TASK", "--data", "data", "--methods", "single", "--steps", "3"),
        cwd=folder, env=clean_env(), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "paratrain bench: error: --task csv_task.py:TASK: the training set is empty; "
        "check the task's data (--data, --limit-train, --limit-eval)"]
    assert not (folder / "runs").exists()


def test_a_sigkilled_bench_takes_its_methods_along(tmp_path):
    """A scheduler's ``kill -9`` of the bench's process group: the method runs in a session of its own,
    and must still end (the workers of ``hangs`` call no paratrain code that would end them)."""
    proc = subprocess.Popen(
        paratrain_cmd("bench", "--task", "examples.my_task:TASK", "--methods", "hangs", "--steps", "2",
                      "--limit-train", "16", "--limit-eval", "8", "--batch-size", "4", "--out", "out"),
        cwd=tmp_path, env=clean_env(PARATRAIN_BENCH_PLUGINS="tests.bench.methods_for_tests", PYTHONPATH=f"{ROOT / 'src'}:{ROOT}"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    method_dir = tmp_path / "out" / "methods" / "hangs"
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 300
        while len(list(method_dir.rglob("hang.*.pid"))) < 2:
            if proc.poll() is not None or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGTERM)
                pytest.fail("the method's workers did not start")
            time.sleep(0.2)
        workers = [psutil.Process(int(path.name.split(".")[1])) for path in method_dir.rglob("hang.*.pid")]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"the method's workers outlived the SIGKILLed bench: {[p.pid for p in alive]}"
    finally:
        for worker in workers:
            if worker.is_running():
                worker.kill()
