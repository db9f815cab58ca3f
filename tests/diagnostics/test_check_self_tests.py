"""The ``if __name__ == "__main__":`` block of a module whose processes come from its own classes, when the block uses
none of them (ResShift's ``trainer.py`` ends with an image test): ``python trainer.py`` runs it in one process, so its
prints are no pitfall. A block that builds the file's trainer, a program whose processes come from elsewhere, or a
registry of decorated commands stays as it was."""

from __future__ import annotations

from paratrain.diagnostics.check import check_file, check_source
from tests.diagnostics.test_check_project_imports import project

TRAINER = """\
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model):
        dist.init_process_group("nccl")
        self.model = DDP(model)

    def train(self):
        for step in range(10):
            self.model(torch.ones(2))


if __name__ == "__main__":
{block}
"""


def _prints(text: str) -> list[int]:
    return [f.line for f in check_source(text) if f.rule == "print-on-every-rank"]


def test_a_self_test_block_that_uses_none_of_the_modules_classes_prints_once():
    block = "    image = np.zeros((4, 4))\n    print(image.mean())\n"
    assert _prints(TRAINER.format(block=block)) == []


def test_a_block_that_runs_the_modules_trainer_prints_on_every_rank():
    block = "    Trainer(torch.nn.Linear(2, 2)).train()\n    print('done')\n"
    assert _prints(TRAINER.format(block=block)) == [19]


def test_a_block_that_joins_the_group_itself_prints_on_every_rank():
    block = "    dist.init_process_group('nccl')\n    print('joined')\n"
    assert _prints(TRAINER.format(block=block)) == [19]


def test_a_program_whose_processes_come_from_its_top_level_keeps_its_prints():
    text = TRAINER.format(block="    print('start')\n").replace(
        "class Trainer:", "dist.init_process_group('nccl')\n\n\nclass Trainer:")
    assert len(_prints(text)) == 1


def test_decorated_commands_may_run_from_the_block():
    text = TRAINER.format(block="    app()\n    print('ran')\n").replace(
        "class Trainer:", "app = object()\n\n\n@app.command()\ndef fit():\n    print('fit')\n\n\nclass Trainer:")
    assert len(_prints(text)) == 1


def test_a_program_whose_processes_come_from_a_project_function_keeps_its_prints(tmp_path):
    script = project(tmp_path, {
        "train.py": """\
import torch
from trainers import fit


def build():
    return torch.nn.Linear(2, 2)


if __name__ == "__main__":
    print("training")
    fit(torch.nn.Linear(2, 2))
""",
        "trainers.py": """\
import torch
import torch.distributed as dist


def fit(model):
    dist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(model)
    return model
"""})
    assert [f.line for f in check_file(script) if f.rule == "print-on-every-rank"] == [10]
