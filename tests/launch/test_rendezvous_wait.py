"""A node waiting to meet the others says, while it waits, whom it waits for, where and how long."""

from __future__ import annotations

import re
import socket

from paratrain.launch.rendezvous_wait import awaited, waiting_line
from tests.launch.processes import run_all
from tests.support import EXAMPLES, clean_env, paratrain_cmd


def test_whom_each_node_waits_for():
    assert awaited(0, 2, 2, static=True) == "node 1 of 2"
    assert awaited(0, 4, 4, static=True) == "nodes 1-3 of 4"
    assert awaited(1, 2, 2, static=True) == "node 0 of 2"
    assert awaited(0, 1, 2, static=False) == "1 to 2 nodes"
    assert waiting_line("node 1 of 2", "10.79.0.1:29621", 30.2, 600) == (
        "waiting for node 1 of 2 at 10.79.0.1:29621 — 30 s of 600 s"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_node_alone_says_whom_it_waits_for_until_the_timeout():
    ports = [_free_port(), _free_port()]
    argvs = [
        paratrain_cmd("run", "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1",
                      "--master-port", str(port), "--rdzv-timeout", "6", str(EXAMPLES / "allreduce.py"))
        for rank, port in enumerate(ports)
    ]
    node0, node1 = run_all(argvs, clean_env(PARATRAIN_WAIT_REPORT_S="2"))
    for node, who, port in ((node0, "node 1 of 2", ports[0]), (node1, "node 0 of 2", ports[1])):
        assert node.returncode != 0, node.stderr
        waiting = [line for line in node.stderr_lines if line.startswith("paratrain run: waiting for")]
        assert waiting, node.stderr
        assert re.fullmatch(rf"paratrain run: waiting for {who} at 127\.0\.0\.1:{port} — \d+ s of 6 s", waiting[0])
        assert node.stderr_lines[-1].startswith("paratrain run: error: ") and str(port) in node.stderr_lines[-1]
