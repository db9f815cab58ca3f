"""Rank guards that ``paratrain check`` reads as limiting a block to one process (or one per machine)."""

from __future__ import annotations

import pytest

from paratrain.diagnostics.check import check_source

_HEAD = """\
import os
import torch
import torch.distributed as dist

RANK = int(os.getenv("RANK", -1))
LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
dist.init_process_group("nccl")
model = torch.nn.Linear(2, 2)
"""


def _findings(source: str) -> dict[tuple[int, str], str]:
    return {(finding.line, finding.rule): finding.problem for finding in check_source(source)}


def _save_after_leaving(test: str) -> str:
    return _HEAD + f"def save():\n    if {test}:\n        return\n    torch.save(model.state_dict(), 'm.pt')\n\n\nsave()\n"


@pytest.mark.parametrize("values", ["(-1, 0)", "[-1, 0]", "{0, -1}"])
def test_leaving_when_the_rank_is_not_in_minus_one_and_zero_guards_what_follows(values: str) -> None:
    assert _findings(_save_after_leaving(f"RANK not in {values}")) == {}


def test_leaving_when_the_local_rank_is_not_in_minus_one_and_zero_leaves_one_process_per_machine() -> None:
    found = _findings(_save_after_leaving("LOCAL_RANK not in [-1, 0]"))
    assert list(found) == [(12, "save-on-every-rank")]
    assert "once per machine" in found[(12, "save-on-every-rank")]


@pytest.mark.parametrize("test", ["RANK not in (0, 1)", "RANK not in (-1, 0, 1)", "epoch not in (-1, 0)"])
def test_leaving_on_other_memberships_guards_nothing(test: str) -> None:
    found = _findings(_save_after_leaving(test))
    assert list(found) == [(12, "save-on-every-rank")]
    assert "every rank" in found[(12, "save-on-every-rank")]


_LIGHTNING = """\
import pytorch_lightning as pl
from pytorch_lightning.loggers.logger import rank_zero_experiment


class Logger(pl.loggers.WandbLogger):
    @property
    @rank_zero_experiment
    def experiment(self):
        print("starting the experiment")
        return None


def create_trainer(config):
    if config.trainer.devices > 1:
        config.trainer.strategy = "ddp"
    print("trainer ready")
    return pl.Trainer(logger=Logger(), **config.trainer)
"""


def test_a_ddp_strategy_stored_on_the_config_a_trainer_unpacks_makes_the_script_multi_process() -> None:
    assert set(_findings(_LIGHTNING)) == {(16, "print-on-every-rank")}
    assert _findings(_LIGHTNING.replace('config.trainer.strategy = "ddp"', 'config.trainer.strategy = "auto"')) == {}


def test_lightnings_rank_zero_experiment_runs_on_rank_zero_only() -> None:
    undecorated = _LIGHTNING.replace("    @rank_zero_experiment\n", "")
    assert (8, "print-on-every-rank") in _findings(undecorated)


@pytest.mark.parametrize("variable", ["LOCAL_RANK", "RANK"])
def test_a_launcher_variables_presence_in_the_environment_guards_nothing(variable: str) -> None:
    # the launcher sets it in every process it starts: the test holds on all ranks
    source = _HEAD + f"if {variable!r} in os.environ:\n    torch.save(model.state_dict(), 'm.pt')\n"
    found = _findings(source)
    assert list(found) == [(10, "save-on-every-rank")]
    assert "once per machine" not in found[(10, "save-on-every-rank")]
