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


def test_a_flag_that_is_a_rank_test_when_distributed_and_true_otherwise_guards_its_block() -> None:
    # PVD: `should_diag = gpu == 0` in the multi-process branch, `should_diag = True` in the single one
    source = _HEAD + (
        "def train(gpu, opt):\n"
        "    if opt.distribution_type == 'multi':\n"
        "        should_diag = gpu == 0\n"
        "    else:\n"
        "        should_diag = True\n"
        "    if should_diag:\n"
        "        torch.save(model.state_dict(), 'm.pt')\n"
        "        print('saved')\n"
    )
    assert _findings(source) == {}


def test_a_flag_that_is_true_or_a_rank_test_of_nothing_guards_nothing() -> None:
    # the constant only counts beside a rank test: `verbose = True` alone is on in every process
    source = _HEAD + "verbose = True\nif verbose:\n    torch.save(model.state_dict(), 'm.pt')\n"
    assert (11, "save-on-every-rank") in _findings(source)


def test_one_negated_distributed_switch_in_an_and_makes_the_branch_single_process() -> None:
    # OpenLTM: `if not args.ddp and not args.dp: exp.test(setting)`
    source = _HEAD + (
        "import argparse\n"
        "args = argparse.ArgumentParser().parse_args()\n"
        "if args.ddp:\n"
        "    model = torch.nn.parallel.DistributedDataParallel(model)\n"
        "print('training')\n"
        "if not args.ddp and not args.dp:\n"
        "    print('testing')\n"
    )
    found = _findings(source)
    assert (13, "print-on-every-rank") in found
    assert (15, "print-on-every-rank") not in found and "15" not in found[(13, "print-on-every-rank")]


def test_a_rank_guarded_function_that_calls_itself_stays_guarded() -> None:
    # CLAP's update_top_k_performance recurses on a list of metrics; its one outside call is on rank 0
    source = _HEAD + (
        "def keep_best(metric):\n"
        "    if isinstance(metric, list):\n"
        "        return keep_best(sum(metric) / len(metric))\n"
        "    torch.save(model.state_dict(), 'best.pt')\n"
        "\n"
        "if dist.get_rank() == 0:\n"
        "    keep_best([1.0, 2.0])\n"
    )
    assert _findings(source) == {}


def test_a_method_named_like_a_library_call_inside_it_is_still_followed() -> None:
    # s3prl's Runner.train calls `entry.model.train()`: another object's method, not a recursion
    source = _HEAD + (
        "class Runner:\n"
        "    def train(self):\n"
        "        model.train()\n"
        "        print('fp16 on')\n"
        "\n"
        "Runner().train()\n"
    )
    assert (12, "print-on-every-rank") in _findings(source)


def test_a_rank_named_rank_that_holds_local_rank_is_once_per_machine() -> None:
    # wespeaker: `rank = int(os.environ['LOCAL_RANK'])`, then `if rank == 0: save_checkpoint(...)`
    source = _HEAD + "rank = int(os.environ['LOCAL_RANK'])\nif rank == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"
    found = _findings(source)
    assert list(found) == [(11, "save-on-every-rank")]
    assert "once per machine" in found[(11, "save-on-every-rank")]


def test_a_local_rank_handed_to_init_process_group_as_the_rank_stays_global() -> None:
    source = _HEAD.replace('dist.init_process_group("nccl")', 'rank = int(os.environ["LOCAL_RANK"])\n'
                           'dist.init_process_group("nccl", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))')
    source += "if rank == 0:\n    torch.save(model.state_dict(), 'm.pt')\n"
    assert _findings(source) == {}


def test_the_else_that_turns_distribution_off_runs_in_one_process() -> None:
    # MAE's init_distributed_mode (its own name quiets prints after it): the last `else:` prints and sets args.distributed = False
    source = _HEAD + (
        "def setup_distributed(args):\n"
        "    if 'RANK' in os.environ and 'WORLD_SIZE' in os.environ:\n"
        "        args.rank = int(os.environ['RANK'])\n"
        "    else:\n"
        "        print('Not using distributed mode')\n"
        "        args.distributed = False\n"
        "        return\n"
        "    print('distributed init done')\n"
        "\n"
        "setup_distributed(None)\n"
    )
    found = _findings(source)
    assert list(found) == [(16, "print-on-every-rank")]
    assert "13" not in found[(16, "print-on-every-rank")]


def test_a_distributed_setting_at_the_top_of_the_main_block_limits_nothing() -> None:
    # bubbliiiing's train.py: `distributed = False` is a switch the user may turn on, not a one-process branch
    source = _HEAD + "if __name__ == '__main__':\n    distributed = False\n    print('training')\n"
    assert list(_findings(source)) == [(11, "print-on-every-rank")]


def test_an_assert_of_one_process_or_an_early_exit_in_an_else_branch_guards_what_follows_it() -> None:
    evolve = _HEAD + (
        "def main(opt):\n"
        "    if not opt.evolve:\n"
        "        pass\n"
        "    else:\n"
        "        {first}\n"
        "        torch.save(model.state_dict(), 'evolved.pt')\n"
    )
    # YOLO's `--evolve`: `assert opt.local_rank == -1, 'DDP mode not implemented for --evolve'`
    assert _findings(evolve.format(first="assert opt.local_rank == -1, 'no DDP for --evolve'")) == {}
    assert _findings(evolve.format(first="if RANK != 0:\n            return")) == {}
    # an assert of anything else, or one after the save, guards nothing
    assert list(_findings(evolve.format(first="assert opt.epochs > 0"))) == [(14, "save-on-every-rank")]
    after = evolve.format(first="pass") + "        assert opt.local_rank == -1\n"
    assert list(_findings(after)) == [(14, "save-on-every-rank")]
    # an assert that holds on every rank (timm's `assert args.rank >= 0`) guards nothing either
    assert list(_findings(evolve.format(first="assert opt.rank >= 0"))) == [(14, "save-on-every-rank")]
    assert _findings(evolve.format(first="assert not opt.distributed")) == {}
