"""An object's attribute that only rank 0's construction gives a value (XMem's trainer, built with a logger under
``if local_rank == 0:`` and without one elsewhere): ``if self.logger is not None:`` in its class is a rank-0 test, and
the saves and prints under it are not reported. One construction that gives every rank a value, a test for ``is
None``, or an attribute also set to something else, and they are. Each project is written for the test in tmp_path."""

from __future__ import annotations

import ast

from paratrain.diagnostics.check import check_file
from paratrain.diagnostics.project_callers import argument_guard
from paratrain.diagnostics.rank_attributes import held_parameter, attribute_of_the_test
from tests.diagnostics.test_check_project_imports import project

TRAINER = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, net, logger=None, save_path=None, local_rank=0):
        self.net = DDP(net.cuda(), device_ids=[local_rank])
        self.logger = logger
        self.save_path = save_path

    def do_pass(self, it):
        loss = self.net(it)
        if self.logger is not None and it % 100 == 0:
            self.save_network(it)
        return loss

    def save_network(self, it):
        torch.save(self.net.state_dict(), f"{self.save_path}_{it}.pth")
        print("network saved at", it)
"""

BUILT_WITH_A_LOGGER_ON_RANK_0 = """\
import torch.distributed as dist
from model.trainer import Trainer

dist.init_process_group("nccl")
local_rank = dist.get_rank()
if local_rank == 0:
    logger = make_logger()
    model = Trainer(net, logger=logger, save_path="saves/run")
else:
    model = Trainer(net)
for it in range(1000):
    model.do_pass(it)
"""

LOGGER_NONE_BUT_ON_RANK_0 = """\
import torch.distributed as dist
from model import trainer

dist.init_process_group("nccl")
logger = None
if dist.get_rank() == 0:
    logger = make_logger()
model = trainer.Trainer(net, logger)
"""


def _rules(path):
    return [f.rule for f in check_file(path)]


def _files(train: str, trainer: str = TRAINER) -> dict[str, str]:
    return {"model/trainer.py": trainer, "model/__init__.py": "", "train.py": train}  # the first: the one checked


def test_saves_under_an_attribute_only_rank_0_is_given_are_not_reported(tmp_path):
    trainer = project(tmp_path, _files(BUILT_WITH_A_LOGGER_ON_RANK_0))
    assert argument_guard(trainer, "Trainer", "logger", 1) == "global"
    rules = _rules(trainer)
    assert "save-on-every-rank" not in rules and "print-on-every-rank" not in rules


def test_a_value_none_but_on_rank_0_passed_by_position_counts_too(tmp_path):
    trainer = project(tmp_path, _files(LOGGER_NONE_BUT_ON_RANK_0))
    assert argument_guard(trainer, "Trainer", "logger", 1) == "global"
    assert "save-on-every-rank" not in _rules(trainer)


def test_one_construction_giving_every_rank_a_logger_keeps_the_findings(tmp_path):
    every_rank = "from model.trainer import Trainer\n\nmodel = Trainer(net, logger=make_logger())\n"
    trainer = project(tmp_path, {**_files(BUILT_WITH_A_LOGGER_ON_RANK_0), "finetune.py": every_rank})
    assert argument_guard(trainer, "Trainer", "logger", 1) == ""
    assert "save-on-every-rank" in _rules(trainer)


def test_keyword_arguments_that_may_hold_it_keep_the_findings(tmp_path):
    unpacked = "from model.trainer import Trainer\n\nmodel = Trainer(net, **options)\n"
    trainer = project(tmp_path, {**_files(BUILT_WITH_A_LOGGER_ON_RANK_0), "finetune.py": unpacked})
    assert argument_guard(trainer, "Trainer", "logger", 1) == ""
    assert "save-on-every-rank" in _rules(trainer)


def test_a_test_for_none_or_an_attribute_set_to_something_else_is_no_rank_test(tmp_path):
    is_none = TRAINER.replace("if self.logger is not None and", "if self.logger is None and")
    trainer = project(tmp_path, _files(BUILT_WITH_A_LOGGER_ON_RANK_0, is_none))
    assert "save-on-every-rank" in _rules(trainer)
    reset = TRAINER.replace("        self.save_path = save_path\n",
                            "        self.save_path = save_path\n        self.logger = self.logger or make_logger()\n")
    trainer = project(tmp_path / "reset", _files(BUILT_WITH_A_LOGGER_ON_RANK_0, reset))
    assert "save-on-every-rank" in _rules(trainer)


def test_the_attribute_and_its_parameter_are_read_from_the_class():
    cls = ast.parse(TRAINER).body[2]
    assert held_parameter(cls, "logger") == ("logger", 1)
    assert held_parameter(cls, "save_path") == ("save_path", 2)
    assert held_parameter(cls, "net") is None  # no default None: every construction gives it one
    assert attribute_of_the_test(ast.parse("self.logger is not None", mode="eval").body) == "logger"
    assert attribute_of_the_test(ast.parse("self.logger is None", mode="eval").body) is None
