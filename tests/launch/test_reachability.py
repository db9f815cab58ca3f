"""A master that cannot be reached, from the second of two network-namespace hosts: closed, no
route, no host and filtered are told apart (before, each read "does not answer (timed out)")."""

from __future__ import annotations

import errno
import json
import socket
import subprocess

from paratrain.launch.reachability import classify
from tests.support import clean_env

ASK = "import json, sys; from paratrain.launch.reachability import reach; r = reach(sys.argv[1], int(sys.argv[2])); " \
      "print(json.dumps([r.cause, r.what, r.fix]))"

SILENT_LISTENER = """
import socket, sys, time
server = socket.socket()
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(0)
held = []
for _ in range(3):  # fill the accept queue (never accepted)
    client = socket.socket()
    client.setblocking(False)
    client.connect_ex((sys.argv[1], int(sys.argv[2])))
    held.append(client)
time.sleep(0.5)
print("full", flush=True)
time.sleep(120)
"""


def _reach_from(namespace: str, host: str, port: int) -> list[str]:
    done = subprocess.run(["ip", "netns", "exec", namespace, "python3", "-c", ASK, host, str(port)],
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_each_cause_is_named_from_the_other_host(two_hosts):
    (ns0, _, addr0), (ns1, _, _) = two_hosts
    cause, what, fix = _reach_from(ns1, addr0, 29690)  # node 0 is there, nothing listens
    assert cause == "closed" and "connection refused" in what and "not started yet" in fix
    nobody = addr0.rsplit(".", 1)[0] + ".77"  # on the link, but no machine has it
    cause, what, fix = _reach_from(ns1, nobody, 29690)
    assert cause == "no host" and "ARP" in what and "check the address" in fix, what
    cause, what, _ = _reach_from(ns1, "192.0.2.1", 29690)  # TEST-NET-1: the namespace has no route there
    assert cause == "no route" and "no route" in what
    # Node 0 drops the connection attempts without an answer (what a firewall's DROP does): a
    # listener whose accept queue is full lets the kernel discard every new SYN.
    silent = subprocess.Popen(["ip", "netns", "exec", ns0, "python3", "-c", SILENT_LISTENER, addr0, "29690"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert silent.stdout.readline().strip() == "full"
        cause, what, fix = _reach_from(ns1, addr0, 29690)
    finally:
        silent.kill()
    assert cause == "filtered" and "gave no answer" in what and "firewall" in fix, what


def test_the_decision_from_the_error_and_the_neighbour_entry():
    refused, unreachable, no_net = (OSError(code, "x") for code in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH))
    assert classify("h", 1, refused, None, 4).cause == "closed"
    assert classify("h", 1, no_net, None, 4).cause == "no route"
    assert classify("h", 1, unreachable, "REACHABLE", 4).cause == "no host"
    assert classify("h", 1, socket.timeout("timed out"), "FAILED", 4).cause == "no host"  # ARP never answered
    assert classify("h", 1, socket.timeout("timed out"), "REACHABLE", 4).cause == "filtered"
    assert classify("h", 1, socket.timeout("timed out"), None, 4).cause == "filtered"  # routed: nothing to ask
