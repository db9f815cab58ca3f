"""The loopback rendezvous store: which of torch's store servers takes our socket, per torch version."""

from __future__ import annotations

import pytest
import torch

from paratrain.launch.loopback_store import LoopbackStore, libuv_takes_a_listening_socket


@pytest.mark.parametrize("version, libuv", [
    ("2.6.0+cu124", False), ("2.7.1+cpu", False),  # "libuv ... does not support initialization with an listen fd"
    ("2.8.0a0+git1234", False),  # a pre-release of 2.8 may predate the change: the classic server is safe
    ("2.8.0", True), ("2.9.1+cu128", True), ("2.13.0+cpu", True),
])
def test_the_store_server_is_chosen_by_torch_version(version, libuv):
    assert libuv_takes_a_listening_socket(version) is libuv


def test_the_store_serves_on_this_torch():
    with LoopbackStore(timeout_s=10) as store:
        store.store.set("key", "value")
        assert store.store.get("key") == b"value" and store.address == "127.0.0.1"
        assert store.store.libuvBackend is libuv_takes_a_listening_socket(torch.__version__)
