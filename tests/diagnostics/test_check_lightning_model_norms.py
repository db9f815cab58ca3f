"""A BatchNorm model of the project fitted by a Lightning Trainer that may start a process per device
(``trainer = Trainer.from_argparse_args(args)``, then ``trainer.fit(model, dm)``) goes into DDP there: the
finding sits at the model's build and names the Trainer's line. A Trainer on one device says nothing.
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_cross_file_wrappers import MODEL
from tests.diagnostics.test_check_project_imports import project

WRAPPER = MODEL + """
    import pytorch_lightning as pl

    class Wrapper(pl.LightningModule):
        def __init__(self, name):
            super().__init__()
            self.model = create_by_name(name)
    """


def _norms(root: Path, trainer: str) -> list[tuple[int, str]]:
    script = project(root, {
        "train.py": f"""\
            from argparse import ArgumentParser
            from pytorch_lightning import Trainer
            from models import Wrapper

            args = ArgumentParser().parse_args()
            model = Wrapper("plus")
            trainer = {trainer}
            trainer.fit(model)
            """,
        "models.py": WRAPPER,
    })
    return [(f.line, f.problem) for f in check_file(script) if f.rule == "batchnorm-without-syncbn"]


def test_a_batchnorm_model_fitted_by_a_lightning_trainer_on_several_devices(tmp_path):
    for number, trainer in enumerate(("Trainer.from_argparse_args(args)", 'Trainer(devices=4, strategy="ddp")')):
        [(line, problem)] = _norms(tmp_path / str(number), trainer)
        assert line == 6 and "models.py:5" in problem and "(also lines 7)" in problem


def test_a_lightning_trainer_on_one_device_says_nothing(tmp_path):
    assert _norms(tmp_path, "Trainer(devices=1)") == []
