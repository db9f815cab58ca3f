"""Library calls that ``paratrain check`` knows by what they do across processes (accelerate's logging
adapter, PEFT, pytorch-ignite's idist), in a script read with its project."""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import git_project


def _rules(script: Path) -> set[tuple[int, str]]:
    return {(finding.line, finding.rule) for finding in check_file(script)}


_LOGGER = """\
import logging
import sys
from accelerate.logging import MultiProcessAdapter


def setup_logger(name="run", use_accelerate=True):
    logger = logging.getLogger(name)
    logger.setLevel(logging.DEBUG)
    handler = logging.StreamHandler(stream=sys.stdout)
    logger.addHandler(handler)
    if use_accelerate:
        return MultiProcessAdapter(logger, {})
    return logger
"""

_LOGGING_SCRIPT = """\
from accelerate import Accelerator
from utils.logger import setup_logger

accelerator = Accelerator()
logger = setup_logger(name="run")
logger.info("starting")
"""


def test_a_project_logger_returning_accelerates_adapter_logs_on_the_main_process_only(tmp_path: Path) -> None:
    assert _rules(git_project(tmp_path, {"utils/logger.py": _LOGGER, "train.py": _LOGGING_SCRIPT})) == set()


def test_the_same_logger_without_the_adapter_logs_on_every_rank(tmp_path: Path) -> None:
    plain = _LOGGER.replace("    if use_accelerate:\n        return MultiProcessAdapter(logger, {})\n", "")
    assert _rules(git_project(tmp_path, {"utils/logger.py": plain, "train.py": _LOGGING_SCRIPT})) == {
        (6, "log-on-every-rank")}


_PEFT_SCRIPT = """\
import os
import torch.distributed as dist
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

local_rank = int(os.environ["LOCAL_RANK"])
model = get_peft_model(AutoModelForCausalLM.from_pretrained("gpt2"), LoraConfig())
model.print_trainable_parameters()
"""


def test_pefts_print_trainable_parameters_prints_on_every_rank(tmp_path: Path) -> None:
    assert _rules(git_project(tmp_path, {"train.py": _PEFT_SCRIPT})) == {(8, "print-on-every-rank")}


def test_pefts_print_trainable_parameters_under_a_rank_test_is_quiet(tmp_path: Path) -> None:
    guarded = _PEFT_SCRIPT.replace("model.print_trainable_parameters()", "if local_rank == 0 and dist.get_rank() == 0:\n"
                                   "    model.print_trainable_parameters()")
    assert _rules(git_project(tmp_path, {"train.py": guarded})) == set()


_IGNITE_SCRIPT = """\
import ignite.distributed as idist


def training(local_rank, config):
    train_loader = idist.auto_dataloader(config["train"], batch_size=32, shuffle=True)
    test_loader = idist.auto_dataloader(config["test"], batch_size=64, shuffle=False)
    print("loaders ready")


with idist.Parallel(backend="nccl", nproc_per_node=2) as parallel:
    parallel.run(training, {"train": [], "test": []})
"""


def test_ignites_parallel_runs_several_processes_and_its_eval_loader_pads(tmp_path: Path) -> None:
    assert _rules(git_project(tmp_path, {"train.py": _IGNITE_SCRIPT})) == {
        (6, "padded-eval-sampler"), (7, "print-on-every-rank")}


def test_an_ignite_eval_loader_given_its_own_sampler_is_not_read(tmp_path: Path) -> None:
    given = _IGNITE_SCRIPT.replace('shuffle=False)', 'sampler=exact_sampler)')
    assert _rules(git_project(tmp_path, {"train.py": given})) == {(7, "print-on-every-rank")}
