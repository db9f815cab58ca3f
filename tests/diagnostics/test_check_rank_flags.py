"""A save in another file under a flag the script set to a rank-0 test runs on rank 0 only.

Chinese-CLIP-like: ``main`` sets ``args.should_save = args.logs is not None and is_master(args)`` and hands
``args`` to ``train`` in train.py, which saves under ``if args.should_save and ...:``.
"""

from __future__ import annotations

from pathlib import Path

from paratrain.diagnostics.check import check_file
from tests.diagnostics.test_check_project_imports import project, script_text

TRAIN = """\
    import torch

    def train(model, args, steps):
        for step in range(steps):
            if {test}:
                torch.save({{"state_dict": model.state_dict()}}, "epoch_latest.pt")
        return steps
    """


def _saves(tmp_path: Path, flag: str, test: str = "args.should_save and step % 10 == 0") -> list[int]:
    script = project(tmp_path, {
        "main.py": script_text(f"""\
            from train import train

            def is_master(args):
                return args.rank == 0

            def main(args):
                dist.init_process_group("nccl")
                args.should_save = {flag}
                model = torch.nn.Linear(2, 2)
                train(model, args, 100)
            """),
        "train.py": TRAIN.format(test=test),
    })
    return [f.line for f in check_file(script) if f.rule == "save-on-every-rank"]


def test_a_flag_set_to_a_rank_test_by_the_script_guards_the_save_in_another_file(tmp_path):
    assert _saves(tmp_path / "a", "args.logs is not None and is_master(args)") == []
    assert _saves(tmp_path / "b", "is_master(args)", test="args.should_save") == []


def test_a_flag_set_otherwise_or_tested_negated_leaves_the_save_on_every_rank(tmp_path):
    assert _saves(tmp_path / "a", "args.logs is not None") == [12]
    assert _saves(tmp_path / "b", "is_master(args)", test="not args.should_save") == [12]
    assert _saves(tmp_path / "c", "is_master(args)", test="args.should_save or step == 0") == [12]
