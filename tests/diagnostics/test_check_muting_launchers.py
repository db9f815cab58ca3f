"""A project's own launcher that starts the ranks with their stdout sent to /dev/null quiets the script's prints.

TTS-like: ``python bin/distribute.py --script train.py`` starts ``python3 bin/train.py --rank=i`` once per GPU,
every rank but the first with ``stdout=open(os.devnull, "w")``; the training script's prints show once. A
launcher that keeps every rank's output, or one beside the script that is not a launcher of its folder's
scripts, leaves the prints on every rank.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from paratrain.diagnostics.check import check_file
from paratrain.diagnostics.muting_launchers import muting_launcher

TRAIN = """\
import argparse
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, default=0)
args = parser.parse_args()
dist.init_process_group("nccl", init_method="tcp://localhost:54321", rank=args.rank, world_size=2)
print("epoch done")
"""

LAUNCHER = """\
import argparse, os, pathlib, subprocess

parser = argparse.ArgumentParser()
parser.add_argument("--script", type=str)
args = parser.parse_args()
folder = pathlib.Path(__file__).parent.absolute()
processes = []
for i in range(2):
    stdout = None if i == 0 else open(os.devnull, "w")
    processes.append(subprocess.Popen(["python3", os.path.join(folder, args.script), f"--rank={i}"], stdout=stdout))
for p in processes:
    p.wait()
"""


def _project(root: Path, readme: str, launcher: str = LAUNCHER) -> Path:
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (root / "bin").mkdir()
    (root / "bin" / "train.py").write_text(TRAIN)
    (root / "bin" / "train_vocoder.py").write_text(TRAIN)
    (root / "bin" / "distribute.py").write_text(launcher)
    (root / "README.md").write_text(readme)
    return root / "bin" / "train.py"


def _prints(path: Path) -> list[int]:
    return [f.line for f in check_file(path) if f.rule == "print-on-every-rank"]


def test_a_readme_command_through_a_launcher_that_mutes_the_other_ranks_quiets_the_prints(tmp_path):
    path = _project(tmp_path, 'CUDA_VISIBLE_DEVICES="0,1" python bin/distribute.py --script train.py --config c.json\n')
    launch = muting_launcher(path)
    assert launch is not None and (launch.where, launch.launcher) == ("README.md:1", "bin/distribute.py")
    assert _prints(path) == []
    # its sibling, which the README does not name, runs through the same launcher of its folder
    assert _prints(tmp_path / "bin" / "train_vocoder.py") == []


@pytest.mark.parametrize("launcher", [
    LAUNCHER.replace('None if i == 0 else open(os.devnull, "w")', "None"),  # every rank's output kept
    LAUNCHER.replace('"--script"', '"--config"'),  # beside it, but no launcher of its folder's scripts
])
def test_a_launcher_that_keeps_the_output_or_runs_no_script_of_its_folder_quiets_nothing(tmp_path, launcher):
    path = _project(tmp_path, "python bin/distribute.py --config c.json\n", launcher)
    assert muting_launcher(path) is None
    assert _prints(path) == [8]
