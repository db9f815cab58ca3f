"""A script its own project runs only as one process is still checked for several, and its findings say so.

ERNIE-like: a pytorch-pretrained-BERT script takes its distributed branch only from the old launcher's
``--local_rank``, and its README runs it as ``python3 code/run.py``: today one process drives every GPU through
DataParallel. Its unguarded ``torch.save`` is what breaks once it runs on several (``paratrain run``), so the
finding stays, and names the one-process command it was read against. A launcher command anywhere for the
script, a process the script starts itself, or a command the reading does not understand leaves the finding as
it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from paratrain.diagnostics.check import check_file
from paratrain.diagnostics.plain_runs import only_plain_runs

SCRIPT = """\
import argparse
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
model = torch.nn.Linear(4, 2)
if args.local_rank != -1:
    dist.init_process_group("nccl")
    model = DistributedDataParallel(model)
elif torch.cuda.device_count() > 1:
    model = torch.nn.DataParallel(model)
torch.save(model.state_dict(), "model.pt")
"""


def _project(root: Path, readme: str, script: str = SCRIPT) -> Path:
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (root / "code").mkdir()
    (root / "code" / "run.py").write_text(script)
    (root / "README.md").write_text(readme)
    return root / "code" / "run.py"


def _save(path: Path) -> str:
    return next(f.problem for f in check_file(path) if f.rule == "save-on-every-rank")


def test_a_script_its_readme_runs_only_plainly_keeps_its_finding_and_names_the_command(tmp_path):
    path = _project(tmp_path, "# Fine-tune\n\n```\nCUDA_VISIBLE_DEVICES=0 python3 -u code/run.py --lr 1e-5\n```\n")
    assert only_plain_runs(path).where == "README.md:4"
    assert "its project runs it as one process today, README.md:4" in _save(path)
    # the rules that are not about several processes say nothing of it
    data_parallel = next(f.problem for f in check_file(path) if f.rule == "data-parallel")
    assert "one process today" not in data_parallel


@pytest.mark.parametrize("readme", [
    "python3 code/run.py\npython -m torch.distributed.launch --nproc_per_node 8 code/run.py\n",  # a launcher too
    "srun python code/run.py\n",  # SLURM runs one per task
    "accelerate launch code/run.py\n",
    "Run `python code/run.py` on one GPU, or see below.\n",  # prose: not read as a command
    "python3 other.py\n",  # no command names it
])
def test_any_other_command_for_the_script_or_none_leaves_the_finding_as_it_is(tmp_path, readme):
    path = _project(tmp_path, readme)
    assert only_plain_runs(path) is None
    assert "one process today" not in _save(path)


def test_a_script_that_starts_its_own_processes_runs_several_from_a_plain_command(tmp_path):
    spawning = SCRIPT.replace("torch.save(", "torch.multiprocessing.spawn(print, nprocs=2)\ntorch.save(")
    path = _project(tmp_path, "python3 code/run.py\n", spawning)
    assert only_plain_runs(path) is not None  # the command alone is plain ...
    assert "one process today" not in _save(path)  # ... but the script starts several


def test_a_command_word_no_file_can_be_named_by_is_skipped_not_a_crash(tmp_path):
    long_word = "a" * 300 + "/code/run.py"  # a path component over the file system's limit (ENAMETOOLONG)
    path = _project(tmp_path, f"python3 {long_word}\npython3 bin/launch.py --script {'b' * 300}/run.py\n")
    assert only_plain_runs(path) is None
    assert "one process today" not in _save(path)  # checked, with no traceback
