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
