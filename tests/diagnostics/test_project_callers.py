"""A module's save (or print) inside a function that the other files of its project call only under a rank-0 test
runs on rank 0 (FocalNet's ``utils.save_checkpoint``, called by ``main.py`` under ``if dist.get_rank() == 0``), and
``check`` of the module says nothing; one unguarded caller, or the function handed on as a callback, and it does.
Each project is written for the test in tmp_path."""

from __future__ import annotations

from paratrain.diagnostics.check import check_file
from paratrain.diagnostics.project_callers import callers_guard
from tests.diagnostics.test_check_project_imports import project

UTILS = """\
import torch
import torch.distributed as dist


def save_checkpoint(model, path):
    torch.save(model.state_dict(), path)


def reduce_tensor(tensor):
    dist.all_reduce(tensor)
    return tensor / dist.get_world_size()
"""

GUARDED = """\
import torch.distributed as dist
from utils import save_checkpoint


def main(model):
    for epoch in range(3):
        if dist.get_rank() == 0 and epoch % 2 == 0:
            save_checkpoint(model, "last.pt")
"""


def _rules(path):
    return [f.rule for f in check_file(path)]


def test_a_save_every_caller_guards_is_not_reported_in_its_module(tmp_path):
    utils = project(tmp_path, {"utils.py": UTILS, "main.py": GUARDED})
    assert callers_guard(utils, "save_checkpoint") == "global"
    assert "save-on-every-rank" not in _rules(utils)


def test_one_unguarded_caller_keeps_the_finding(tmp_path):
    other = "import utils\n\n\ndef finetune(model):\n    utils.save_checkpoint(model, 'ft.pt')\n"
    utils = project(tmp_path, {"utils.py": UTILS, "main.py": GUARDED, "finetune.py": other})
    assert callers_guard(utils, "save_checkpoint") == ""
    assert "save-on-every-rank" in _rules(utils)


def test_a_function_handed_on_as_a_callback_may_run_anywhere(tmp_path):
    hooks = "from utils import save_checkpoint\n\nHOOKS = {'save': save_checkpoint}\n"
    utils = project(tmp_path, {"utils.py": UTILS, "main.py": GUARDED, "hooks.py": hooks})
    assert callers_guard(utils, "save_checkpoint") == ""
    assert "save-on-every-rank" in _rules(utils)


def test_star_imports_aliases_and_packages_are_followed(tmp_path):
    star = ("from pkg.utils import *\nimport torch.distributed as dist\n\n\ndef run(m):\n"
            "    if dist.get_rank() == 0:\n        save_checkpoint(m, 'a.pt')\n")
    aliased = ("from pkg import utils as U\nimport torch.distributed as dist\n\n\ndef run(m):\n"
               "    if dist.get_rank() != 0:\n        return\n    U.save_checkpoint(m, 'b.pt')\n")
    utils = project(tmp_path, {"pkg/utils.py": UTILS, "pkg/__init__.py": "", "train_a.py": star,
                               "train_b.py": aliased})
    assert callers_guard(utils, "save_checkpoint") == "global"
    # the same name called bare in a file that imports another module's save_checkpoint is not a caller of this one
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "utils.py").write_text(UTILS)
    (tmp_path / "other" / "run.py").write_text("from utils import save_checkpoint\nsave_checkpoint(None, 'c.pt')\n")
    assert callers_guard(utils, "save_checkpoint") == "global"
    assert "save-on-every-rank" not in _rules(utils)
    # ...but that other module's own caller is unguarded: its save is reported
    assert "save-on-every-rank" in _rules(tmp_path / "other" / "utils.py")


def test_a_caller_that_only_tests_the_local_rank_saves_once_per_machine(tmp_path):
    local = GUARDED.replace("dist.get_rank() == 0", "args.local_rank == 0")
    utils = project(tmp_path, {"utils.py": UTILS, "main.py": local})
    assert callers_guard(utils, "save_checkpoint") == "local"
