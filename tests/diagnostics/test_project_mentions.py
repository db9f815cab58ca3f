"""Which functions of a module another file of its project may call (``project_names``): the other files' imports
and calls, read as text. Each project is written for the test in tmp_path."""

from __future__ import annotations

from paratrain.diagnostics.project_mentions import called_only_here, project_names
from tests.diagnostics.test_check_project_imports import project

TRAINER = """\
def gather(param, quiet=False):
    return param


def save(state):
    return gather(state, quiet=True)
"""


def test_a_from_import_of_the_module_makes_its_names_known(tmp_path):
    trainer = project(tmp_path, {"trainer.py": TRAINER, "train.py": "from trainer import save\nsave({})\n"})
    assert project_names(trainer, "save") is True
    assert project_names(trainer, "gather") is False  # imported module, function named nowhere else
    assert called_only_here(trainer, "gather", method=False)


def test_a_bare_call_of_a_function_the_calling_file_defines_is_its_own(tmp_path):
    other = "from trainer import save\n\n\ndef gather(x, quiet=False):\n    return x\n\n\nsave(gather(1))\n"
    trainer = project(tmp_path / "own", {"trainer.py": TRAINER, "train.py": other})
    assert project_names(trainer, "gather") is False
    # the same call in a file that does not define it may be ours (a star import)
    trainer = project(tmp_path / "star", {"trainer.py": TRAINER, "train.py": "from trainer import *\n\nsave(gather(1))\n"})
    assert project_names(trainer, "gather") is True
    assert not called_only_here(trainer, "gather", method=False)


def test_a_method_is_called_only_here_when_no_other_file_calls_its_name(tmp_path):
    trainer = project(tmp_path / "calls", {"trainer.py": TRAINER, "train.py": "import trainer\nrunner.gather(1)\n"})
    assert not called_only_here(trainer, "gather", method=True)
    trainer = project(tmp_path / "other", {"trainer.py": TRAINER, "train.py": "import trainer\nrunner.other(1)\n"})
    assert called_only_here(trainer, "gather", method=True)


def test_an_unmarked_folder_tells_nothing(tmp_path):
    (tmp_path / "trainer.py").write_text(TRAINER)
    assert project_names(tmp_path / "trainer.py", "gather") is None
    assert not called_only_here(tmp_path / "trainer.py", "gather", method=False)
