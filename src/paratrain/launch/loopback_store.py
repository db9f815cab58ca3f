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

from paratrain.errors import ConfigError
from paratrain.launch.network import LOOPBACK


class LoopbackStore:
    """Holds the store server (and so its loopback socket) for the launcher's lifetime.

    Args:
        timeout_s: the store's operation timeout.
        port: 0 (default) lets the kernel pick a free port; else that port.

    Raises:
        ConfigError: ``port`` is taken.
    """

    def __init__(self, timeout_s: float = 600.0, port: int = 0):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # As TCPStore does: a port whose old connections sit in TIME_WAIT is reusable.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((LOOPBACK, port))
        except OSError as exc:
            listener.close()
            raise ConfigError(
                f"port {port} on {LOOPBACK} is taken ({exc.strerror}); pick another --master-port or leave it out"
            ) from None
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
