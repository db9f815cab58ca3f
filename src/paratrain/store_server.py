"""A TCPStore server that listens on one address only.

torch's TCPStore server listens on every interface of the machine. paratrain binds the
listening socket itself, to the one address its peers use, and hands the socket's file
descriptor to the store (``master_listen_fd``): a one-node job listens on loopback only,
and the kernel hands out the port while the socket is held, so there is no
pick-then-bind race between two jobs on one machine.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist


def store_server(address: str, port: int = 0, timeout_s: float = 600.0, multi_tenant: bool = False) -> dist.TCPStore:
    """Start a TCPStore server on ``address``: ``port`` (0: one the kernel picks; read it
    from the store's ``port``). The store owns the socket and closes it when it is freed.

    Raises:
        OSError: ``address`` cannot be bound here (not this machine's, or the port is taken).
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As TCPStore does: a port whose old connections sit in TIME_WAIT is reusable.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(512)
    except OSError:
        listener.close()
        raise
    return dist.TCPStore(
        address,
        listener.getsockname()[1],
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
        multi_tenant=multi_tenant,
        master_listen_fd=listener.detach(),
    )
