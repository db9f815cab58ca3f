"""Why a node cannot reach ``MASTER:PORT``, told apart: four causes that need four fixes.

"does not answer (timed out)" reads the same for a wrong address and a firewall; a user then
checks the wrong thing. What the kernel and the link say distinguishes them:

* **closed** — the host answered with a reset (connection refused): the address is right,
  nothing listens on the port (node 0 not started yet, another ``--master-port``);
* **no route** — the kernel has no route to that network (ENETUNREACH): wrong address or
  a missing default route;
* **no host** — the address is on this machine's link but nobody answers its ARP/neighbour
  requests (EHOSTUNREACH, or a neighbour entry FAILED/INCOMPLETE): wrong address, or the
  machine is off or unplugged;
* **filtered** — the host is there (its neighbour entry resolved, or it is routed elsewhere)
  but the connection attempt got no answer at all: a firewall drops the packets to that port.
"""

from __future__ import annotations

import errno
import socket
import subprocess
from dataclasses import dataclass

CONNECT_TIMEOUT_S = 4.0  # longer than the kernel's ARP attempts (3 probes, 1 s apart), so those can fail first


@dataclass(frozen=True)
class Reach:
    """The outcome of one connection attempt: ``cause`` is "open", "closed", "no route",
    "no host" or "filtered"; ``what`` what was seen, ``fix`` what to check."""

    cause: str
    what: str
    fix: str = ""

    @property
    def detail(self) -> str:
        return f"{self.what}: {self.fix}" if self.fix else self.what

    @property
    def ok(self) -> bool:
        return self.cause == "open"


def reach(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> Reach:
    """Try one TCP connection to ``host:port`` and say what happened."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return Reach("open", f"{host}:{port} accepts connections")
    except OSError as exc:
        return classify(host, port, exc, neighbour_state(host), timeout_s)


def classify(host: str, port: int, exc: OSError, neighbour: str | None, timeout_s: float) -> Reach:
    """The cause of a failed connection from the error and the address' neighbour entry
    (``ip neigh``: REACHABLE, STALE, FAILED, ... or None when not on this machine's link)."""
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return Reach("closed", f"{host} answers but nothing listens on port {port} (connection refused)",
                     "node 0's job or doctor is not started yet, or it uses another --master-port")
    if exc.errno == errno.ENETUNREACH:
        return Reach("no route", f"this machine has no route to {host}'s network",
                     "check the address (and the default route)")
    if exc.errno == errno.EHOSTUNREACH or neighbour in ("FAILED", "INCOMPLETE"):
        return Reach("no host", f"no machine answers at {host} on this link (no reply to ARP/neighbour requests)",
                     "check the address, and that the machine is on and connected")
    if isinstance(exc, TimeoutError | socket.timeout):
        return Reach("filtered", f"{host} is there but port {port} gave no answer within {timeout_s:g}s",
                     f"a firewall drops the packets; open TCP port {port} (and the workers' ports) between the nodes")
    return Reach("closed" if exc.errno == errno.ECONNRESET else "filtered",
                 f"{host}:{port} cannot be reached ({exc.strerror or exc})", "check the address, port and firewall")


def neighbour_state(host: str) -> str | None:
    """The state of ``host``'s neighbour (ARP/NDP) entry on this machine, or None (no entry,
    not on a directly connected link, or no ``ip`` command)."""
    try:
        shown = subprocess.run(["ip", "neigh", "show", "to", host], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    words = shown.split()
    return words[-1] if words else None
