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
