"""``paratrain run --fault-tolerance replicas``: the words each group's launcher gets, and the job shapes
refused before anything starts."""

from __future__ import annotations

from paratrain.launch.replica_argv import group_words


def test_each_group_gets_runs_words_without_the_fault_tolerance_and_node_flags():
    argv = ["paratrain", "run", "--fault-tolerance", "replicas", "--replica-groups=3", "--nproc-per-node", "1",
            "train.py", "--replica-groups", "9"]
    assert group_words(argv) == ["--nproc-per-node", "1", "train.py", "--replica-groups", "9"]
    argv = ["paratrain", "run", "--fault-tolerance", "replicas", "--nnodes", "2", "--node-rank=1", "--master-addr",
            "10.0.0.1", "--master_port", "29500", "--nproc-per-node", "2", "train.py", "--nnodes", "5"]
    assert group_words(argv) == ["--nproc-per-node", "2", "train.py", "--nnodes", "5"]
    assert group_words(["paratrain", "run", "--fault-tolerance", "replicas", "-m", "pkg.train", "--lr", "1"]) == [
        "-m", "pkg.train", "--lr", "1"]


def test_a_group_shape_that_could_be_uneven_is_refused_in_one_line_before_anything_starts(tmp_path):
    import subprocess

    import pytest

    from paratrain.errors import ConfigError
    from paratrain.launch.replica_argv import check_group_shape
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
    done = subprocess.run(paratrain_cmd("run", "--fault-tolerance", "replicas", "--nnodes", "2", "--master-addr",
                                        "[::1]:29500", str(script)), env=clean_env(), capture_output=True, text=True,
                          timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert lines[0].endswith("give the address alone and the port apart: --master-addr ::1 --master-port 29500"), lines
    assert "Lighthouse" not in done.stdout + done.stderr and not (tmp_path / "train.py.ran").exists()
    check_group_shape(1, 1)
    check_group_shape(2, 2, "10.0.0.1")
    with pytest.raises(ConfigError, match="on --nnodes 2 needs --master-addr: an address of node 0"):
        check_group_shape(2, 2)
