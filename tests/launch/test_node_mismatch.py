"""Two nodes started unlike each other, on one machine: two `paratrain train` launchers over 127.0.0.1.

* different --nproc-per-node (1 and 2): torchrun allows it, so the job trains on 3 ranks;
  the ranks agree on 2 nodes (none derives 3 or 1 from its own process count), so all of
  them enter the link probe and both launchers exit 0;
* different --nnodes (2 and 3): refused on every node in one line naming both values, with a
  non-zero exit, before any step and without waiting on the store at exit.
"""

from __future__ import annotations

import json

from tests.launch.processes import finish, start
from tests.support import clean_env, free_port, paratrain_cmd




def _two_nodes(tmp_path, per_node: list[list[str]]):
    port = str(free_port())
    common = ["--master-addr", "127.0.0.1", "--master-port", port, "--rdzv-timeout", "30",
              "--max-steps", "2", "--out", str(tmp_path / "run")]
    # A collective that some rank never enters fails after 60 s instead of the default 600 s.
    env = clean_env(PARATRAIN_TIMEOUT="60")
    procs = [
        start(paratrain_cmd("train", "digits", "--node-rank", str(rank), *common, *extra), env)
        for rank, extra in enumerate(per_node)
    ]
    return finish(procs)


def test_nodes_with_different_process_counts_train_together(tmp_path):
    node0, node1 = _two_nodes(tmp_path, [["--nnodes", "2", "--nproc-per-node", "1"],
                                         ["--nnodes", "2", "--nproc-per-node", "2"]])
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr + node1.stderr
    said = node0.stdout + node0.stderr
    assert "link between the 2 nodes" in said and "2 nodes: node 0 (" in said and "runs ranks 1-2" in said, said
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["world_size"] == 3, summary


def test_nodes_started_with_different_nnodes_are_refused(tmp_path):
    node0, node1 = _two_nodes(tmp_path, [["--nnodes", "2", "--nproc-per-node", "1"],
                                         ["--nnodes", "3", "--nproc-per-node", "1"]])
    for node in (node0, node1):
        assert node.returncode not in (0, None), node.stderr
        refusal = [line for line in node.stderr_lines if "different --nnodes" in line]
        assert refusal, node.stderr
        assert "node 0 (" in refusal[0] and "with --nnodes 2" in refusal[0] and "with --nnodes 3" in refusal[0]
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
