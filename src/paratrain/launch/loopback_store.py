"""A rendezvous store that listens on 127.0.0.1 only, on a port the kernel picks.

torch's TCPStore server always listens on every interface. For a one-node job we
bind the listening socket ourselves to loopback and hand its file descriptor to a
*multi-tenant* TCPStore in this (the launcher's) process. torch.distributed.run's
static rendezvous then opens "its" store on the same port in the same process and
gets ours, and workers reach it as MASTER_ADDR=127.0.0.1. Two jobs on one machine
never collide (the kernel hands out the port while we hold it, no pick-then-bind
race) and nothing listens on public interfaces.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist

LOOPBACK = "127.0.0.1"


class LoopbackStore:
    """Holds the store server (and so its loopback socket) for the launcher's lifetime."""

    def __init__(self, timeout_s: float = 600.0):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((LOOPBACK, 0))
        listener.listen(512)
        self.port: int = listener.getsockname()[1]
        self.store = dist.TCPStore(
            LOOPBACK,
            self.port,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=timeout_s),
            multi_tenant=True,
            master_listen_fd=listener.detach(),  # the store owns and closes it
        )

    @property
    def address(self) -> str:
        return LOOPBACK

    def close(self) -> None:
        self.store = None

    def __enter__(self) -> LoopbackStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
