"""--node-rank 0 on a machine that does not own --master-addr: refused at once, naming both addresses.

Two network namespaces (tests/netns.py): node 0 is started on the second "PC" while
--master-addr names the first one.
"""

from __future__ import annotations

from tests.launch.processes import run_all
from tests.support import EXAMPLES, clean_env, paratrain_cmd


def test_node_zero_on_the_wrong_machine_is_refused_at_once(two_hosts):
    (_, _, addr0), (ns1, _, addr1) = two_hosts
    command = paratrain_cmd("run", "--nnodes", "2", "--node-rank", "0", "--master-addr", addr0,
                            "--master-port", "29500", "--rdzv-timeout", "20", str(EXAMPLES / "allreduce.py"))
    (node0,) = run_all([["ip", "netns", "exec", ns1, *command]], clean_env())
    assert node0.returncode == 2, node0.stderr
    assert node0.stderr_lines == [
        f"paratrain run: error: --node-rank 0 must run on the machine at {addr0}: node 0 hosts the rendezvous "
        f"there, and this machine has {addr1}; start node 0 on that machine (or, if {addr0} reaches this machine "
        "only through NAT, give node 0 one of its own addresses as --master-addr)"
    ], node0.stderr
