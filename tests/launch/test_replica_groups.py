"""``paratrain run --fault-tolerance replicas``: the words each group's launcher gets. (Its processes —
a group killed and started again, the Lighthouse lost and everything resumed from disk — are tested with
the strategy they serve, in one job: tests/strategy/test_ft_ddp.py.)"""

from __future__ import annotations

from paratrain.launch.replica_groups import group_words


def test_each_group_gets_runs_words_without_the_fault_tolerance_and_node_flags():
    argv = ["paratrain", "run", "--fault-tolerance", "replicas", "--replica-groups=3", "--nproc-per-node", "1",
            "train.py", "--replica-groups", "9"]
    assert group_words(argv) == ["--nproc-per-node", "1", "train.py", "--replica-groups", "9"]
    argv = ["paratrain", "run", "--fault-tolerance", "replicas", "--nnodes", "2", "--node-rank=1", "--master-addr",
            "10.0.0.1", "--master_port", "29500", "--nproc-per-node", "2", "train.py", "--nnodes", "5"]
    assert group_words(argv) == ["--nproc-per-node", "2", "train.py", "--nnodes", "5"]
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
    check_group_shape(2, 2, "10.0.0.1")
    with pytest.raises(ConfigError, match="on --nnodes 2 needs --master-addr: an address of node 0"):
        check_group_shape(2, 2)


def test_several_nodes_node_0_away_from_the_master_address_and_a_node_without_lighthouse_say_so_in_one_line(tmp_path):
    """Node 0 hosts the Lighthouse at --master-addr: on a machine without that address it refuses at once; another
    node waits for the Lighthouse within --rdzv-timeout and then names its address. Nothing runs the script."""
    import subprocess

    from tests.support import clean_env, free_port, paratrain_cmd

    script = tmp_path / "train.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    port = str(free_port())
    common = ["run", "--fault-tolerance", "replicas", "--replica-groups", "1", "--nnodes", "2", "--master-port", port]
    away = subprocess.run(paratrain_cmd(*common, "--node-rank", "0", "--master-addr", "192.0.2.1", str(script)),
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    waiting = subprocess.run(paratrain_cmd(*common, "--node-rank", "1", "--master-addr", "127.0.0.1", "--rdzv-timeout",
                                           "1", str(script)), env=clean_env(), capture_output=True, text=True, timeout=120)
    assert away.returncode != 0 and waiting.returncode != 0
    away_lines, waiting_lines = away.stderr.strip().splitlines(), waiting.stderr.strip().splitlines()
    assert len(away_lines) == 1 and "--node-rank 0 must run on the machine at 192.0.2.1" in away_lines[0], away.stderr
    assert len(waiting_lines) == 1, waiting.stderr
    assert f"the Lighthouse at 127.0.0.1:{port} (node 0) did not answer within 1s" in waiting_lines[0], waiting.stderr
    assert not (tmp_path / "train.py.ran").exists()
