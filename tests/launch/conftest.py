"""Fixtures of the launch tests: two hosts made of network namespaces (see tests/netns.py)."""

from __future__ import annotations

import pytest

from tests import netns


@pytest.fixture
def two_hosts():
    """(namespace, interface, address) for node 0 and node 1; always deleted afterwards."""
    try:
        with netns.two_hosts() as hosts:
            yield [(h.namespace, h.interface, h.address) for h in hosts]
    except netns.NetnsUnavailable as exc:
        pytest.skip(f"two-node test: {exc}")
