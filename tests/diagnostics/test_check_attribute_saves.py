"""A project object whose construction wraps ``self.model`` in DataParallel, and whose ``train`` hands ``self.model``
to an early-stopping helper that saves ``model.state_dict()`` (the THUML time-series family: ``exp.train(setting)``
→ ``early_stopping(vali_loss, self.model, path)`` → ``self.save_checkpoint(...)`` → ``torch.save``): the wrapper's
keys are saved, reported at the script's call. Each project is written for the test in tmp_path."""

from __future__ import annotations

import pytest

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project

RUN = """\
import argparse

from exp.exp_main import Exp_Main

parser = argparse.ArgumentParser()
parser.add_argument("--use_multi_gpu", action="store_true")
args = parser.parse_args()
exp = Exp_Main(args)
exp.train("setting")
"""
BASIC = """\
import torch


class Exp_Basic:
    def __init__(self, args):
        self.args = args
        self.model = self._build_model().to("cuda")

    def _build_model(self):
        raise NotImplementedError
"""
MAIN = """\
import torch
import torch.nn as nn

from exp.exp_basic import Exp_Basic
from utils.tools import EarlyStopping


class Exp_Main(Exp_Basic):
    def _build_model(self):
        model = nn.Linear(4, 4)
        if self.args.use_multi_gpu:
            model = nn.DataParallel(model, device_ids=[0, 1])
        return model

    def train(self, setting):
        early_stopping = EarlyStopping(patience=3)
        for epoch in range(10):
            loss = 1.0 / (epoch + 1)
            early_stopping(loss, {handed}, "checkpoints")
{ending}
"""
TOOLS = """\
import torch


class EarlyStopping:
    def __init__(self, patience=7):
        self.patience = patience
        self.best = None

    def __call__(self, val_loss, model, path):
        if self.best is None or val_loss < self.best:
            self.best = val_loss
            self.save_checkpoint(val_loss, model, path)

    def save_checkpoint(self, val_loss, model, path):
        torch.save({saved}, path + "/checkpoint.pth")
"""


def _findings(tmp_path, handed="self.model", ending="", saved="model.state_dict()") -> list[tuple[int, str]]:
    script = project(tmp_path, {
        "run.py": RUN, "exp/__init__.py": "", "exp/exp_basic.py": BASIC, "utils/__init__.py": "",
        "exp/exp_main.py": MAIN.format(handed=handed, ending=ending), "utils/tools.py": TOOLS.format(saved=saved)})
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "wrapped-state-dict"]


def test_a_wrapped_attribute_handed_to_an_early_stopping_saver_is_reported_at_the_scripts_call(tmp_path):
    [(line, problem)] = _findings(tmp_path)
    assert RUN.splitlines()[line - 1] == 'exp.train("setting")'
    assert "utils/tools.py:15" in problem and "module." in problem


@pytest.mark.parametrize("change", [
    {"handed": "self.model.module"},  # the inner model handed over
    {"saved": "model.module.state_dict()"},  # the saver unwraps it
    {"ending": "        torch.save(self.model.module.state_dict(), 'checkpoints/checkpoint.pth')"},  # train re-saves it
    {"handed": "torch.nn.Linear(4, 4)"},  # not the attribute
])
def test_an_unwrapped_or_other_model_is_not_reported(tmp_path, change):
    assert _findings(tmp_path, **change) == []
