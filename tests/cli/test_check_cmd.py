"""``paratrain check FOLDER`` lists the folder's scripts: hidden ones left out, and a subfolder that disappears while
the folder is read (a running job's scratch folder, as under /tmp) skipped instead of ending in a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess

from paratrain.cli import check_cmd
from tests.support import clean_env, paratrain_cmd


def _tree(root):
    for name in ("train.py", "sub/model.py", "gone/tmp.py", ".hidden/x.py", "sub/.secret.py", "notes.txt"):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("print('hi')\n")


def test_hidden_files_and_folders_are_left_out(tmp_path):
    _tree(tmp_path)
    assert check_cmd._python_files(tmp_path) == sorted(
        str(tmp_path / name) for name in ("gone/tmp.py", "sub/model.py", "train.py"))


def test_a_subfolder_removed_while_the_folder_is_read_is_skipped(tmp_path, monkeypatch):
    _tree(tmp_path)
    real_scandir = os.scandir

    def scandir_after_removal(path="."):  # the race, made to happen: the folder goes just before it is listed
        if isinstance(path, (str, os.PathLike)) and os.path.basename(os.fspath(path)) == "gone":
            shutil.rmtree(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir_after_removal)
    assert check_cmd._python_files(tmp_path) == sorted(str(tmp_path / name) for name in ("sub/model.py", "train.py"))


def test_the_command_reads_a_folder_and_exits_by_its_findings(tmp_path):
    _tree(tmp_path)
    proc = subprocess.run(paratrain_cmd("check", str(tmp_path)), env=clean_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "no problems found in 3 script(s)"
