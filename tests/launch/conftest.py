"""Fixtures of the launch tests: two hosts made of network namespaces."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess

import pytest


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def two_hosts():
    """(namespace, interface, address) for node 0 and node 1; always deleted afterwards."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("two-node test needs root and iproute2 ('ip netns'), not available here")
    tag = secrets.token_hex(3)
    subnet = int(tag[:2], 16)  # addresses exist only inside the two namespaces
    hosts = [(f"paratrain-{tag}-{i}", f"pt{tag}{i}", f"10.231.{subnet}.{i + 1}") for i in range(2)]
    created = []
    try:
        for ns, _, _ in hosts:
            made = _ip("netns", "add", ns)
            if made.returncode != 0:
                pytest.skip(f"'ip netns add' is not available here: {made.stderr.strip()}")
            created.append(ns)
        (ns0, if0, addr0), (ns1, if1, addr1) = hosts
        steps = [
            ["link", "add", if0, "type", "veth", "peer", "name", if1],
            ["link", "set", if0, "netns", ns0],
            ["link", "set", if1, "netns", ns1],
        ]
        for ns, ifname, addr in hosts:
            steps += [
                ["-n", ns, "addr", "add", f"{addr}/24", "dev", ifname],
                ["-n", ns, "link", "set", ifname, "up"],
                ["-n", ns, "link", "set", "lo", "up"],
            ]
        for step in steps:
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        yield hosts
    finally:
        for ns in created:  # deleting a namespace deletes its end of the veth pair, and so the pair
            _ip("netns", "del", ns)
        _ip("link", "del", hosts[0][1])  # a pair that never moved into the namespaces (no-op otherwise)
