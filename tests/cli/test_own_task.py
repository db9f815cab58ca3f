"""Your own task through `paratrain train FILE.py:TASK` (as `paratrain bench --task` takes it) and
`paratrain predict` on own runs: real CLI, two processes, a relative path typed in a scratch folder.

Before: train refused the spec ("unknown task"), and predict on a pt.fit run said "unknown task
'model'; built-in tasks: ..." without a way forward.
"""

from __future__ import annotations

import subprocess

import torch
from safetensors.torch import load_file

import paratrain as pt
from paratrain.cli.main import main
from paratrain.tasks.api import TaskOptions
from tests.support import clean_env, paratrain_cmd

OWN_TASK = '''\
import torch
from paratrain.tasks.api import Recipe, Task
from paratrain.tasks.classification import ClassificationEvaluator, predictions_from_scores


class Quadrant(Task):
    """Is x + y positive? Points in, a label out; predict reads "x y"."""

    name = "quadrant"
    summary = "two numbers, their sum's sign"
    recipe = Recipe(batch_size=8, lr=0.1)
    options_used = ()

    def __init__(self, options=None):
        super().__init__(options)
        self.label_names = ["negative", "positive"]

    def datasets(self):
        x = torch.randn(48, 2, generator=torch.Generator().manual_seed(0))
        data = torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())
        return torch.utils.data.Subset(data, range(32)), torch.utils.data.Subset(data, range(32, 48))

    def collate(self, samples):
        points, labels = zip(*samples)
        return {"points": torch.stack(points), "labels": torch.stack(labels)}

    def build_model(self):
        return torch.nn.Linear(2, 2)

    def forward(self, model, batch):
        logits = model(batch["points"])
        return torch.nn.functional.cross_entropy(logits, batch["labels"]), logits

    def evaluator(self):
        return ClassificationEvaluator(self.label_names)

    def predict(self, model, inputs):
        points = torch.tensor([[float(v) for v in text.split()] for text in inputs])
        with torch.no_grad():
            return predictions_from_scores(inputs, model(points), self.label_names)


TASK = Quadrant
'''


def test_train_takes_a_task_file_relative_to_the_working_folder_and_predict_runs_it(tmp_path):
    work = tmp_path / "my work"  # a space in the path, as users' folders have
    (work / "tasks").mkdir(parents=True)
    (work / "tasks" / "own.py").write_text(OWN_TASK)
    train = subprocess.run(paratrain_cmd("train", "tasks/own.py:TASK", "--nproc-per-node", "2", "--max-steps", "3",
                                         "--no-progress", "--no-tensorboard"),
                           cwd=work, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    run = work / "runs" / "own-TASK"  # named after the file and the attribute, as bench names its folder
    assert (run / "summary.json").is_file()
    predict = subprocess.run(paratrain_cmd("predict", "--json", "--trust-task-code", "runs/own-TASK", "5 4", "-3 -6"),
                             cwd=work, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert predict.returncode == 0, predict.stderr
    assert [line.count('"label"') for line in predict.stdout.splitlines()] == [1, 1]


def test_predict_on_a_pt_fit_run_says_how_to_use_its_weights(tmp_path, capsys):
    torch.manual_seed(0)
    x = torch.randn(24, 2)
    data = torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())
    out = tmp_path / "fit"
    pt.fit(torch.nn.Linear(2, 2), data, data, max_steps=1, batch_size=8, out_dir=str(out), progress=False,
           tensorboard=False)
    capsys.readouterr()
    assert main(["predict", str(out), "1 2"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "is a pt.fit(model) run" in error and "unknown task" not in error
    # The advice holds: the exported file loads into the user's model as it is.
    assert main(["ckpt", "export", str(out), "-o", str(tmp_path / "model.safetensors")]) == 0
    torch.nn.Linear(2, 2).load_state_dict(load_file(tmp_path / "model.safetensors"))


def test_predict_on_an_own_task_without_predict_fails_before_loading_weights(tmp_path, capsys):
    from paratrain.tasks.task_ref import resolve_task  # moved here from bench/: train and bench read one spec

    (tmp_path / "own.py").write_text(OWN_TASK.replace("    def predict(", "    def no_predict("))
    task = resolve_task(f"{tmp_path / 'own.py'}:TASK", TaskOptions())
    task.save(tmp_path / "run")
    assert main(["predict", "--trust-task-code", str(tmp_path / "run"), "1 2"]) == 2
    error = capsys.readouterr().err.strip()
    assert "task 'quadrant' of" in error and "has no predict(model, inputs)" in error and "ckpt export" in error
