"""``paratrain run --fault-tolerance replicas``: the words each group's launcher gets. (Its processes —
a group killed and started again, the Lighthouse lost and everything resumed from disk — are tested with
the strategy they serve, in one job: tests/strategy/test_ft_ddp.py.)"""

from __future__ import annotations

from paratrain.launch.replica_groups import group_words


def test_each_group_gets_runs_words_without_the_fault_tolerance_flags():
    argv = ["paratrain", "run", "--fault-tolerance", "replicas", "--replica-groups=3", "--nproc-per-node", "1",
            "train.py", "--replica-groups", "9"]
    assert group_words(argv) == ["--nproc-per-node", "1", "train.py", "--replica-groups", "9"]
    assert group_words(["paratrain", "run", "--fault-tolerance", "replicas", "-m", "pkg.train", "--lr", "1"]) == [
        "-m", "pkg.train", "--lr", "1"]


def test_the_first_line_of_a_process_is_waited_for_within_its_guard():
    """A Lighthouse that never prints its address must not hold the launcher without end."""
    import subprocess
    import sys

    from paratrain.launch.replica_groups import _first_line

    talks = subprocess.Popen([sys.executable, "-c", "print('http://vm:29510', flush=True); import time; time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE, text=True)
    try:
        assert _first_line(talks, 20.0) == "http://vm:29510"
        assert _first_line(silent, 0.5) is None
        assert _first_line(gone, 20.0) == ""
    finally:
        for process in (talks, silent, gone):
            process.kill()
            process.wait()


def test_a_group_shape_that_could_be_uneven_is_refused_in_one_line_before_anything_starts(tmp_path):
    import subprocess

    import pytest

    from paratrain.errors import ConfigError
    from paratrain.launch.replica_groups import check_group_shape
    from tests.support import clean_env, paratrain_cmd

    script = tmp_path / "train.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    done = subprocess.run(paratrain_cmd("run", "--fault-tolerance", "replicas", "--replica-groups", "2", "--nnodes",
                                        "1:2", "--nproc-per-node", "2", str(script)),
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--nnodes 1:2 lets a group grow and shrink" in lines[0], done.stderr
    assert "Lighthouse" not in done.stdout + done.stderr and not (tmp_path / "train.py.ran").exists()
    check_group_shape(1, 1)
    with pytest.raises(ConfigError, match="runs each replica group on this node, got --nnodes 2"):
        check_group_shape(2, 2)
