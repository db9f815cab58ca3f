"""Interface choice, port checks, name resolution and the wait for the master (local sockets only)."""

import socket

import psutil
import pytest

from paratrain.errors import ConfigError, LaunchError
from paratrain.launch import network


def test_resolve():
    assert network.resolve("127.0.0.1") == "127.0.0.1"
    assert network.resolve("localhost") in ("127.0.0.1", "::1")
    assert network.is_loopback("localhost") and not network.is_loopback("192.0.2.77")
    with pytest.raises(ConfigError, match="'no-such-host.invalid' does not resolve"):
        network.resolve("no-such-host.invalid")


def test_interface_for_own_addresses_is_the_interface_that_carries_them():
    lo = network.interface_for("127.0.0.1")
    assert lo.address == "127.0.0.1" and psutil.net_if_stats()[lo.name]
    own = [
        (name, a.address)
        for name, addrs in psutil.net_if_addrs().items()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    for name, address in own:  # the master is this machine: the kernel answers with that address
        assert network.interface_for(address) == network.Interface(name, address)


def test_port_in_use():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        server.listen()
        assert network.port_in_use("127.0.0.1", port)
        assert network.port_in_use("0.0.0.0", port)
    assert not network.port_in_use("127.0.0.1", port)


def test_wait_for_listener():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        network.wait_for_listener("127.0.0.1", server.getsockname()[1], timeout_s=5)
        port = server.getsockname()[1]
    with pytest.raises(LaunchError, match=f"master at 127.0.0.1:{port} did not answer within 0.3s"):
        network.wait_for_listener("127.0.0.1", port, timeout_s=0.3, interval_s=0.05)


def test_an_address_flag_takes_ipv4_ipv6_or_a_name_alone_and_refuses_a_port_in_one_line():
    for good in ("10.0.0.1", "node0", "::1", "[::1]", "fd00::1", "fe80::1%eth0"):
        network.check_address_form("--master-addr", good)
    for bad, fix in (("[::1]:29500", "--master-addr ::1 --master-port 29500"),
                     ("10.0.0.1:29500", "--master-addr 10.0.0.1 --master-port 29500"),
                     ("[::1", "--master-addr ::1 or --master-addr [::1]"),
                     ("http://[fd00::1]:29500", "--master-addr fd00::1 (the port goes in --master-port)"),
                     ("fd00::1:29500", "--master-addr fd00::1 or --master-addr [fd00::1]")):
        with pytest.raises(ConfigError) as refused:
            network.check_address_form("--master-addr", bad)
        assert "\n" not in str(refused.value) and fix in str(refused.value), str(refused.value)
