"""The network questions a launcher must answer before starting workers.

Which local interface reaches the master, is a port free, does a host name resolve,
is the master listening yet. Standard library + psutil only: no torch here.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass

from paratrain.errors import ConfigError, LaunchError

LOOPBACK = "127.0.0.1"

# Any port works for a UDP "connect": it sends nothing, it only asks the kernel's
# routing table which source address it would use (the `ip route get` trick).
_PROBE_PORT = 9


@dataclass(frozen=True)
class Interface:
    """A local network interface and the address on it that routes to the master."""

    name: str
    address: str


def resolve(host: str) -> str:
    """The IP address of ``host`` (IPv4 preferred), as a string.

    Raises:
        ConfigError: the name does not resolve on this machine.
    """
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(
            f"master address {host!r} does not resolve on this machine ({getattr(exc, 'strerror', None) or exc}); "
            "pass the master's IP address or a host name listed in /etc/hosts or DNS"
        ) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return infos[0][4][0]


def check_address_form(flag: str, value: str) -> None:
    """Refuse, in one line, a node-0 address written with its port or with half a bracket: ``--master-addr``
    takes an IPv4 or IPv6 address (``::1`` or ``[::1]``) or a host name, alone (the port is ``--master-port``).

    Raises:
        ConfigError: ``value`` holds a port (``10.0.0.1:29500``, ``[::1]:29500``), a scheme, or unbalanced brackets.
    """
    if "://" in value:
        from urllib.parse import urlsplit

        shown = (urlsplit(value).hostname or "ADDRESS").strip("[]")
        raise ConfigError(f"{flag} {value!r} is a URL; give the address alone: {flag} {shown} (the port goes in "
                          "--master-port)")
    host = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    if "[" in host or "]" in host:
        address, _, port = value.rpartition(":")
        fix = f"{flag} {address.strip('[]')} --master-port {port}" if address.startswith("[") and \
            address.endswith("]") and port.isdigit() else f"{flag} ::1 or {flag} [::1] (an IPv6 address, whole)"
        raise ConfigError(f"{flag} {value!r} is not an address: give the address alone and the port apart: {fix}")
    if ":" in host:
        try:
            ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            address, _, port = host.rpartition(":")
            if port.isdigit() and address.count(":") == 0:
                raise ConfigError(f"{flag} {value!r} holds a port; write {flag} {address} --master-port {port}") from None
            raise ConfigError(f"{flag} {value!r} is not an IPv4 or IPv6 address or a host name; write an IPv6 "
                              f"address alone ({flag} fd00::1 or {flag} [fd00::1]) and the port apart "
                              "(--master-port)") from None


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (after resolving names)."""
    try:
        return ipaddress.ip_address(resolve(host)).is_loopback
    except ConfigError:
        return False


def interface_for(master_addr: str) -> Interface:
    """The local interface whose address the kernel would use to reach ``master_addr``.

    Works when ``master_addr`` is one of this machine's own addresses too (the kernel
    then answers with that address, which sits on the interface that carries it).

    Raises:
        ConfigError: ``master_addr`` does not resolve.
        LaunchError: no route to it, or the source address sits on no interface.
    """
    ip = resolve(master_addr)
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((ip, _PROBE_PORT))
        except OSError as exc:
            raise LaunchError(
                f"no network route from this machine to the master {master_addr} ({ip}): {exc.strerror}; "
                f"check the address and the routes ('ip route get {ip}')"
            ) from None
        source = probe.getsockname()[0]
    name = _interface_with_address(source)
    if name is None:
        raise LaunchError(
            f"the address {source} that routes to the master {master_addr} sits on no local interface; "
            "set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to the interface to use"
        )
    return Interface(name=name, address=source)


def _interface_with_address(address: str) -> str | None:
    import psutil

    wanted = ipaddress.ip_address(address.split("%")[0])
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                if ipaddress.ip_address(addr.address.split("%")[0]) == wanted:
                    return name
            except ValueError:
                continue
    return None


def port_in_use(addr: str, port: int) -> bool:
    """True when a TCP server could not listen on ``addr:port`` right now.

    Uses SO_REUSEADDR like torch's TCPStore, so a port that only has connections in
    TIME_WAIT counts as free (the store would bind it), and a listener counts as taken.
    """
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((addr, port))
        except OSError:
            return True
    return False


def wait_for_listener(host: str, port: int, timeout_s: float, interval_s: float = 0.5) -> None:
    """Block until something accepts TCP connections on ``host:port``.

    Non-master nodes call this before their agent joins the rendezvous: the master may
    start a little later, and an unreachable master should end in one clear line, not
    in the store client's retry log.

    Raises:
        LaunchError: nothing answered within ``timeout_s`` (names address and port).
    """
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LaunchError(
                f"the master at {host}:{port} did not answer within {timeout_s:g}s ({last_error}); "
                "start node 0 first with the same --master-addr/--master-port, and check the address, "
                "the port and the firewall (or raise --rdzv-timeout)"
            )
        try:
            with socket.create_connection((host, port), timeout=min(remaining, 2.0)):
                return
        except OSError as exc:
            last_error = exc.strerror or str(exc) or type(exc).__name__
        time.sleep(min(interval_s, max(deadline - time.monotonic(), 0)))


def local_addresses() -> list[str]:
    """This machine's IPv4 and IPv6 addresses, loopback excluded, in interface order."""
    import psutil

    found = []
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                ip = ipaddress.ip_address(addr.address.split("%")[0])
            except ValueError:
                continue
            if not ip.is_loopback and not ip.is_link_local and str(ip) not in found:
                found.append(str(ip))
    return found


def require_own_address(master_addr: str) -> None:
    """Node 0 hosts the rendezvous store at ``master_addr``: refuse at once on a machine that has
    no such address, instead of the other nodes waiting for a store nobody reaches there.

    Raises:
        ConfigError: ``master_addr`` resolves to an address on no interface of this machine
            (names it and this machine's addresses).
        ConfigError: ``master_addr`` does not resolve.
    """
    ip = resolve(master_addr)
    if ipaddress.ip_address(ip).is_loopback or _interface_with_address(ip) is not None:
        return
    mine = local_addresses()
    shown = master_addr if master_addr.strip("[]") == ip else f"{master_addr} ({ip})"
    raise ConfigError(
        f"--node-rank 0 must run on the machine at {shown}: node 0 hosts the rendezvous there, and this machine has "
        f"{', '.join(mine) if mine else 'no such address'}; start node 0 on that machine (or, if {ip} reaches this "
        "machine only through NAT, give node 0 one of its own addresses as --master-addr)"
    )
