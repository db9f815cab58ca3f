"""Which machine this is, for people and for counting: the host name alone is not enough.

Two machines often share a host name (a cloned image, ``localhost``, ``vm``): "2 ranks on 1
host (vm)" about two PCs, or a failure line that names a host the user has two of, is a
confident wrong answer. A machine is told apart by its boot id (new at every boot, different on
cloned VMs) and the address it reaches the job's master from (different for each network
namespace, container or PC on one link); people read the host name with that address.
"""

from __future__ import annotations

import functools
import os
import socket


@functools.lru_cache(maxsize=None)
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as source:
            return source.read().strip()[:8]
    except OSError:
        return ""


def source_address(toward: str | None) -> str | None:
    """The local address this machine reaches ``toward`` from (no packet is sent), or None."""
    if not toward:
        return None
    try:
        family = socket.AF_INET6 if ":" in toward else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((toward, 9))  # a UDP "connect" only picks the route and source address
            return probe.getsockname()[0]
    except OSError:
        return None


def machine_key(toward: str | None = None) -> str:
    """An identity equal on two processes exactly when they run on the same machine (or the same
    network namespace of it): boot id and source address. ``toward`` defaults to ``MASTER_ADDR``."""
    address = source_address(toward or os.environ.get("MASTER_ADDR"))
    return f"{_boot_id()}/{address or socket.gethostname()}"


def machine_label(toward: str | None = None) -> str:
    """``vm@10.79.0.2``: the host name and the address toward the master, when there is one."""
    address = source_address(toward or os.environ.get("MASTER_ADDR"))
    return f"{socket.gethostname()}@{address}" if address else socket.gethostname()
