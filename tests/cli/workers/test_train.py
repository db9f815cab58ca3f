"""``paratrain train``'s worker ends without the interpreter's teardown (env/fast_exit.py): what a task's own code
registered still runs, and the exit code a failing rank ends with is the one its launcher sees and exits with."""

from __future__ import annotations

import subprocess

from tests.cli.test_own_task import OWN_TASK
from tests.support import clean_env, paratrain_cmd

# The quadrant task of test_own_task, whose module registers an atexit handler and keeps a file open (in every
# process that imports it: the launcher and each worker), and whose rank 1 fails at its second step with an error
# of its own exit code.
FAILING_TASK = OWN_TASK.replace("import torch\n", '''import atexit, os, torch
from paratrain.errors import DataError

WHO = "rank" + os.environ["RANK"] if "RANK" in os.environ else "launcher"
NOTES = os.environ["TASK_NOTES"]


def _noted():
    with open(os.path.join(NOTES, f"atexit-{WHO}"), "w") as file:
        file.write("ran")


atexit.register(_noted)
KEPT = open(os.path.join(NOTES, f"kept-open-{WHO}"), "w")  # never closed
KEPT.write("buffered")


class BadBatch(DataError):
    exit_code = 3
''', 1).replace('''    def forward(self, model, batch):
''', '''    calls = 0

    def forward(self, model, batch):
        type(self).calls += 1
        if WHO == "rank1" and type(self).calls == 2:
            raise BadBatch("batch 2 is bad on rank 1")
''', 1)


def test_a_failing_ranks_exit_code_reaches_the_launcher_and_the_tasks_atexit_and_open_file_are_kept(tmp_path):
    (tmp_path / "failing.py").write_text(FAILING_TASK)
    notes = tmp_path / "notes"
    notes.mkdir()
    train = subprocess.run(paratrain_cmd("train", "failing.py:TASK", "--nproc-per-node", "2", "--max-steps", "6",
                                         "--no-progress", "--no-tensorboard"),
                           cwd=tmp_path, env=clean_env(TASK_NOTES=str(notes)), capture_output=True, text=True, timeout=300)
    assert train.returncode == 3, train.stderr[-3000:]  # the failed worker's own code, seen by torch's agent
    last = train.stderr.strip().splitlines()[-1]
    assert "rank 1" in last and "batch 2 is bad on rank 1" in last, last  # from the worker's error file
    for who in ("launcher", "rank1"):  # the failing rank and the launcher both ended without a teardown
        assert (notes / f"atexit-{who}").read_text() == "ran", who
        assert (notes / f"kept-open-{who}").read_text() == "buffered", who
