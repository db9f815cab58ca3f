"""Two "hosts" on one machine: two network namespaces joined by a veth pair, optionally rate-limited.

Used by the two-node tests and by ``benchmarks/slow_links.py``. Needs root and iproute2
(``ip netns``, ``tc``). Addresses exist only inside the two namespaces. Names carry this
process id and a random tag, so runs by several people at once never collide, and the
namespaces (and with them the veth pair) are deleted on exit.

A rate limit is a token bucket (``tc … tbf``) on each end of the pair; an added delay
needs ``netem``, which some kernels (containers) do not have: :class:`NetnsUnavailable`
then says so.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass


class NetnsUnavailable(RuntimeError):
    """Namespaces, veth pairs or the asked traffic shaping cannot be made here (the reason says why)."""


@dataclass(frozen=True)
class Host:
    namespace: str
    interface: str
    address: str

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def why_unavailable() -> str | None:
    """Why two namespaces cannot be built here, or None when they probably can."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs iproute2's '{tool}' command"
    return None


def _shape(host: Host, rate: str | None, delay: str | None) -> None:
    if delay:
        # netem does both: delay, and a rate limit when one is asked.
        spec = ["netem", "delay", delay, "limit", "100000", *(["rate", rate] if rate else [])]
    elif rate:
        # Token bucket; the burst must hold one GSO segment (64 KiB) of the veth pair.
        spec = ["tbf", "rate", rate, "burst", "256kb", "latency", "100ms"]
    else:
        return
    done = _run("tc", "-n", host.namespace, "qdisc", "replace", "dev", host.interface, "root", *spec)
    if done.returncode != 0:
        raise NetnsUnavailable(f"'tc qdisc … {spec[0]}' failed on this kernel: {done.stderr.strip()}")


@contextlib.contextmanager
def two_hosts(rate: str | None = None, delay: str | None = None, ipv6: bool = False) -> Iterator[tuple[Host, Host]]:
    """Two namespaces joined by a veth pair, each end limited to ``rate`` (tc syntax: ``100mbit``,
    ``1gbit``) with ``delay`` added (``2ms``; needs netem); deleted on exit. With ``ipv6`` the pair carries
    only IPv6 addresses (``fd00:<random>::1`` and ``::2``, a unique local prefix; no IPv4 on it) and so does
    ``Host.address``.

    Raises:
        NetnsUnavailable: not root, no iproute2, or the kernel refuses namespaces or the shaping.
    """
    reason = why_unavailable()
    if reason:
        raise NetnsUnavailable(reason)
    tag = f"{os.getpid() % 0xFFFFF:x}{secrets.token_hex(2)}"  # interface names have at most 15 characters
    subnet = secrets.randbelow(250) + 1
    addresses = [f"fd00:231:{subnet:x}::{i + 1}" if ipv6 else f"10.231.{subnet}.{i + 1}" for i in range(2)]
    hosts = tuple(Host(f"paratrain-{tag}-{i}", f"pt{tag}{i}", addresses[i]) for i in range(2))
    created: list[str] = []
    try:
        for host in hosts:
            made = _run("ip", "netns", "add", host.namespace)
            if made.returncode != 0:
                raise NetnsUnavailable(f"'ip netns add' is not available here: {made.stderr.strip()}")
            created.append(host.namespace)
        first, second = hosts
        steps = [
            ["link", "add", first.interface, "type", "veth", "peer", "name", second.interface],
            ["link", "set", first.interface, "netns", first.namespace],
            ["link", "set", second.interface, "netns", second.namespace],
        ]
        for host in hosts:
            steps += [
                # nodad: the address is usable at once, not after IPv6's duplicate address detection (~1 s)
                ["-n", host.namespace, "addr", "add", f"{host.address}/64", "dev", host.interface, "nodad"] if ipv6
                else ["-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", host.interface],
                ["-n", host.namespace, "link", "set", host.interface, "up"],
                ["-n", host.namespace, "link", "set", "lo", "up"],
            ]
        for step in steps:
            done = _run("ip", *step)
            if done.returncode != 0:
                raise NetnsUnavailable(f"ip {' '.join(step)}: {done.stderr.strip()}")
        for host in hosts:
            _shape(host, rate, delay)
        yield hosts
    finally:
        for namespace in created:  # deleting a namespace deletes its end of the veth pair, and so the pair
            _run("ip", "netns", "del", namespace)
        _run("ip", "link", "del", hosts[0].interface)  # a pair that never moved into the namespaces (no-op otherwise)
