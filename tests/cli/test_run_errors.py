"""Bad input to `paratrain run`: one line on stderr naming the fix, a non-zero exit code, no hang.

All commands start at once (module fixture), each test checks one of them.
"""

from __future__ import annotations

import socket

import pytest
import torch

from tests.launch.processes import Result, finish, start
from tests.support import EXAMPLES, free_port, paratrain_cmd

ALLREDUCE = str(EXAMPLES / "allreduce.py")




@pytest.fixture(scope="module")
def busy_port():
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))
        server.listen()
        yield server.getsockname()[1]


CASES = {
    "missing script": (["examples/no_such_script.py"], 2, "script 'examples/no_such_script.py' not found"),
    "zero processes": (["--nproc-per-node", "0", ALLREDUCE], 2, "--nproc-per-node 0 must be at least 1"),
    "negative processes": (["--nproc-per-node", "-1", ALLREDUCE], 2, "--nproc-per-node -1 must be at least 1"),
    "node rank too high": (
        ["--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1", ALLREDUCE],
        2,
        "--node-rank 2 is outside --nnodes 2; number the nodes 0 to 1",
    ),
    "busy port": (["--master-port", "{busy}", ALLREDUCE], 2, "--master-port {busy} is already in use on this machine"),
    "nccl without cuda": (
        ["--backend", "nccl", ALLREDUCE],
        2,
        "backend nccl needs CUDA, and no CUDA device is visible",
    ),
    "unresolvable master": (
        ["--nnodes", "2", "--master-addr", "no-such-host.invalid", ALLREDUCE],
        2,
        "master address 'no-such-host.invalid' does not resolve",
    ),
    # Node 1 waits for a master that never starts: it gives up after --rdzv-timeout.
    "unreachable master": (
        [
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            "{free}",
            "--rdzv-timeout",
            "2",
            ALLREDUCE,
        ],
        1,
        "the master at 127.0.0.1:{free} did not answer within 2s",
    ),
}


# Node 0 waits for a node 1 that never comes.
NODE_ZERO_ALONE = [
    "--nnodes",
    "2",
    "--master-addr",
    "127.0.0.1",
    "--master-port",
    "{free0}",
    "--rdzv-timeout",
    "2",
    ALLREDUCE,
]


@pytest.fixture(scope="module")
def results(busy_port) -> dict[str, tuple[Result, dict]]:
    ports = {"busy": busy_port, "free": free_port(), "free0": free_port()}
    names = [n for n in CASES if not (n == "nccl without cuda" and torch.cuda.is_available())]
    argvs = [CASES[n][0] for n in names] + [NODE_ZERO_ALONE]
    procs = [start(paratrain_cmd("run", *[a.format(**ports) for a in argv])) for argv in argvs]
    return {name: (result, ports) for name, result in zip([*names, "node zero alone"], finish(procs), strict=True)}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_and_non_zero(name, results):
    if name not in results:
        pytest.skip("CUDA is visible here, so --backend nccl is valid")
    result, ports = results[name]
    _, exit_code, message = CASES[name]
    assert result.returncode == exit_code, result.stderr
    assert len(result.stderr_lines) == 1, result.stderr  # no traceback wall, no log noise
    line = result.stderr_lines[0]
    assert line.startswith("paratrain run: error: ") and message.format(**ports) in line, line
    assert result.stdout == ""


def test_node_zero_alone_stops_after_the_rendezvous_timeout(results):
    result, ports = results["node zero alone"]
    assert result.returncode == 1, result.stderr
    info, error = result.stderr_lines  # which interface was chosen, then why it stopped
    assert info.startswith("paratrain run: network interface lo (127.0.0.1) routes to the master 127.0.0.1")
    assert error.startswith(f"paratrain run: error: the rendezvous at 127.0.0.1:{ports['free0']} timed out after 2s")
    assert "1/2 clients joined" in error and "start every node (--node-rank 0 to 1)" in error
