"""``paratrain bench --install-horovod``'s pieces that run without building (the build itself takes minutes)."""

from __future__ import annotations

import pytest

from paratrain.bench.horovod_install import PATCHED_CMAKE_FILES, raise_cxx_standard
from paratrain.cli.main import main
from paratrain.errors import LaunchError

# As horovod 0.28.1's sdist has them (other lines elided).
TOP = "cmake_minimum_required(VERSION 3.13)\nset(CMAKE_CXX_STANDARD 14)\nproject(horovod CXX)\n"
TORCH = "if(HAVE_TORCH)\n    set(CMAKE_CXX_STANDARD 14)\nendif()\n"


def test_the_cxx_standard_is_raised_to_17_in_both_cmake_files(tmp_path):
    for name, text in zip(PATCHED_CMAKE_FILES, (TOP, TORCH)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    changed = raise_cxx_standard(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in changed] == list(PATCHED_CMAKE_FILES)
    assert "set(CMAKE_CXX_STANDARD 17)" in (tmp_path / "CMakeLists.txt").read_text()
    assert "set(CMAKE_CXX_STANDARD 17)" in (tmp_path / "horovod/torch/CMakeLists.txt").read_text()
    assert "14" not in (tmp_path / "horovod/torch/CMakeLists.txt").read_text()


def test_another_release_without_the_setting_is_refused(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("project(horovod CXX)\n")
    with pytest.raises(LaunchError, match="sets no CMAKE_CXX_STANDARD 14"):
        raise_cxx_standard(tmp_path)


def test_missing_compiler_and_cmake_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: no cmake, no g++
    assert main(["bench", "--install-horovod"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("paratrain bench: error: building horovod needs cmake and g++, not found on PATH; "
                   "install them (e.g. apt-get install cmake g++) and run paratrain bench --install-horovod again")
