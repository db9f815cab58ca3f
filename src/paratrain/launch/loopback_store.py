"""A rendezvous store that listens on 127.0.0.1 only, on a port the kernel picks.

torch's TCPStore server always listens on every interface. For a one-node job the
launcher holds a *multi-tenant* store bound to loopback (:mod:`paratrain.store_server`)
in its own process. torch.distributed.run's static rendezvous then opens "its" store on the same port in the same process and
gets ours, and workers reach it as MASTER_ADDR=127.0.0.1. Two jobs on one machine
never collide (the kernel hands out the port while we hold it, no pick-then-bind
race) and nothing listens on public interfaces.
"""

from __future__ import annotations

from paratrain.errors import ConfigError
from paratrain.launch.network import LOOPBACK
from paratrain.store_server import store_server


class LoopbackStore:
    """Holds the store server (and so its loopback socket) for the launcher's lifetime.

    Args:
        timeout_s: the store's operation timeout.
        port: 0 (default) lets the kernel pick a free port; else that port.

    Raises:
        ConfigError: ``port`` is taken.
    """

    def __init__(self, timeout_s: float = 600.0, port: int = 0):
        try:
            self.store = store_server(LOOPBACK, port, timeout_s, multi_tenant=True)
        except OSError as exc:
            raise ConfigError(
                f"port {port} on {LOOPBACK} is taken ({exc.strerror}); pick another --master-port or leave it out"
            ) from None
        self.port: int = self.store.port

    @property
    def address(self) -> str:
        return LOOPBACK

    def close(self) -> None:
        self.store = None

    def __enter__(self) -> LoopbackStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
