"""A method of a script's class that nothing reaches (a plugin built and never handed on) prints nowhere."""

from __future__ import annotations

from paratrain.diagnostics.check import check_source

_SCRIPT = """\
import pytorch_lightning as pl
from lightning_fabric.plugins import CheckpointIO


class CustomCheckpointIO(CheckpointIO):
    def load_checkpoint(self, path):
        print("loading", path)


def main():
    custom_ckpt = CustomCheckpointIO()
    trainer = pl.Trainer(devices=4, strategy="ddp")
    trainer.fit(None)


if __name__ == "__main__":
    main()
"""


def _rules(source: str) -> set[tuple[int, str]]:
    return {(finding.line, finding.rule) for finding in check_source(source)}


def test_a_plugin_built_and_never_handed_on_runs_none_of_its_methods() -> None:
    assert _rules(_SCRIPT) == set()
    assert _rules(_SCRIPT.replace("    custom_ckpt = CustomCheckpointIO()\n", "    CustomCheckpointIO()\n")) == set()


def test_a_plugin_handed_to_the_trainer_prints_on_every_rank() -> None:
    passed = _SCRIPT.replace('strategy="ddp")', 'strategy="ddp", plugins=[custom_ckpt])')
    assert _rules(passed) == {(7, "print-on-every-rank")}


def test_a_method_called_by_name_still_runs() -> None:
    called = _SCRIPT.replace("    trainer.fit(None)\n", "    trainer.fit(None)\n    other.load_checkpoint('x')\n")
    assert _rules(called) == {(7, "print-on-every-rank")}
