"""Two nodes for real: two network namespaces joined by a veth pair, one `paratrain run` in each.

No *_SOCKET_IFNAME is set here. Inside a namespace the host name resolves to 127.0.0.1,
so plain torchrun's gloo connects node 1 to its own loopback and fails with
"Connection refused"; this passes only because paratrain exports the interface that
routes to the master.
"""

from __future__ import annotations

import pytest

from tests import netns
from tests.launch.processes import finish, start
from tests.support import EXAMPLES, clean_env, paratrain_cmd


@pytest.fixture
def two_hosts():
    """(namespace, interface, address) for node 0 and node 1; always deleted afterwards."""
    try:
        with netns.two_hosts() as hosts:
            yield [(h.namespace, h.interface, h.address) for h in hosts]
    except netns.NetnsUnavailable as exc:
        pytest.skip(f"two-node test: {exc}")


def test_two_nodes_all_reduce_over_a_veth_pair(two_hosts):
    (ns0, if0, addr0), (ns1, if1, _) = two_hosts
    env = clean_env()
    assert not any(k.endswith("_SOCKET_IFNAME") for k in env)
    common = [
        "--nnodes",
        "2",
        "--master-addr",
        addr0,
        "--master-port",
        "29500",
        "--nproc-per-node",
        "1",
        "--rdzv-timeout",
        "60",
        str(EXAMPLES / "allreduce.py"),
    ]
    nodes = [
        start(["ip", "netns", "exec", ns, *paratrain_cmd("run", "--node-rank", str(rank), *common)], env)
        for rank, ns in enumerate((ns0, ns1))
    ]
    node0, node1 = finish(nodes)
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr + node1.stderr
    assert "rank 0/2: all_reduce(rank + 1) = 3" in node0.stdout
    assert f"all_reduce OK: sum 3 over 2 processes, backend gloo, rendezvous {addr0}:29500" in node0.stdout
    assert "rank 1/2: all_reduce(rank + 1) = 3" in node1.stdout
    # Each node picked its own end of the veth pair, the one that routes to the master.
    assert f"network interface {if0} ({addr0}) routes to the master {addr0}" in node0.stderr
    assert f"network interface {if1} " in node1.stderr and f"GLOO_SOCKET_IFNAME={if1}" in node1.stderr
