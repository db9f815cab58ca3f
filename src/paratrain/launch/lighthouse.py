"""torchft's Lighthouse for one fault-tolerant job: started and watched on node 0, waited for elsewhere.

The Lighthouse is the one server that tells every step which replica groups are alive
(:mod:`paratrain.launch.replica_groups` supervises the groups around it). Node 0's launcher runs it as
a child process (killed by the kernel if the launcher dies) and knows it is lost when it exits; the
other nodes' launchers only reach it over TCP, so they wait for it to accept connections (bounded by
``--rdzv-timeout``) and count it lost after ``PROBE_MISSES`` refused probes in a row.
"""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time

from paratrain.errors import LaunchError
from paratrain.replica_environ import QUORUM_TICK_MS, liveness_ms

START_S = 30.0  # a guard: the Lighthouse prints its address within a second
#: On nodes other than 0: how often the Lighthouse is asked whether it still listens (a TCP connect), and
#: how many refusals in a row count as its loss (node 0 restarts it within seconds, never faster than this).
PROBE_S = 0.5
PROBE_MISSES = 2

_SERVER = """\
import signal, sys
from torchft._torchft import LighthouseServer
server = LighthouseServer(bind="{bind}", min_replicas={min_replicas}, join_timeout_ms={join},
                          quorum_tick_ms={tick}, heartbeat_timeout_ms={heartbeat})
print(server.address(), flush=True)
signal.sigwait([signal.SIGTERM, signal.SIGINT])
server.shutdown()
"""


def die_with_supervisor() -> None:
    """``preexec_fn`` of every process the supervisor starts (runs in the child between fork and exec):
    the kernel SIGKILLs it when the supervisor dies (``PR_SET_PDEATHSIG``)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


class Lighthouse:
    """The job's Lighthouse at ``host:port``: this launcher's child on node 0 (``own``), a peer's elsewhere.

    Args:
        host: the address it listens on (node 0's ``--master-addr``; loopback on one node).
        port: its port (0 on one node: the kernel picks, and :meth:`start` learns it).
        own: whether this launcher starts it (node 0).
        min_replicas: fewest groups a quorum may hold.
        wait_s: how long :meth:`wait` waits for a peer's Lighthouse (``--rdzv-timeout``).

    Raises:
        ConfigError: ``PARATRAIN_FT_HEARTBEAT_TIMEOUT_MS`` or ``PARATRAIN_FT_JOIN_TIMEOUT_MS`` is not a valid
            number of milliseconds (:func:`~paratrain.replica_environ.liveness_ms`).
    """

    def __init__(self, host: str, port: int, own: bool, min_replicas: int = 1, wait_s: float = 600.0):
        self.host, self.port, self.own = host, port, own
        self.min_replicas, self.wait_s = min_replicas, wait_s
        self.process: subprocess.Popen | None = None
        self.address = "" if own else self._url(port)
        self._next_probe, self._misses = 0.0, 0
        self.heartbeat_ms, self.join_ms = liveness_ms()  # bad values are refused before anything starts

    def _url(self, port: int) -> str:
        return f"http://{f'[{self.host}]' if ':' in self.host else self.host}:{port}"

    @property
    def endpoint(self) -> str:
        """Its ``HOST:PORT`` as the lines name it."""
        return self.address.split("//", 1)[1]

    def start_or_wait(self) -> None:
        """Start it (node 0) or wait until the peer's accepts connections (the others)."""
        if self.own:
            self.start()
        else:
            self.wait()

    def start(self) -> None:
        """Start it; its first line is its address (one node: a loopback port the kernel picked).

        Raises:
            LaunchError: it exited or printed nothing within ``START_S`` (names why, torchft missing included).
        """
        bind = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        code = _SERVER.format(bind=bind, min_replicas=self.min_replicas, join=self.join_ms, tick=QUORUM_TICK_MS,
                              heartbeat=self.heartbeat_ms)
        # Its log (a line per quorum) goes to a file: a pipe nobody reads would fill and stall it.
        log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=log, text=True,
                                        preexec_fn=die_with_supervisor)
        line = first_line(self.process, START_S)
        if line is None:  # alive but silent: never wait for it without end
            self._kill()
            raise LaunchError(f"the torchft Lighthouse printed no address within {START_S:g} s; check "
                              f"that this host can listen on {bind} and that torchft imports (pip install 'paratrain[ft]')")
        if not line.startswith("http"):
            try:
                self.process.wait(timeout=START_S)
            except subprocess.TimeoutExpired:
                self._kill()
            log.seek(0)
            error = (log.read().strip().splitlines() or [line or "no output"])[-1]
            raise LaunchError(f"the torchft Lighthouse did not start on {bind} ({error}); pip install 'paratrain[ft]'"
                              + ("" if self.port == 0 else ", or pick another --master-port"))
        # Its address names this host; the groups reach it at the address it listens on.
        self.address = self._url(int(line.rsplit(":", 1)[1]))

    def wait(self) -> None:
        """Block until a peer's Lighthouse accepts connections.

        Raises:
            LaunchError: it did not within ``wait_s`` (names its address).
        """
        deadline = time.monotonic() + self.wait_s
        while (reason := refused(self.host, self.port)) is not None:
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"the Lighthouse at {self.endpoint} (node 0) did not answer within {self.wait_s:g}s "
                    f"({reason}); start node 0's paratrain run --fault-tolerance replicas with the same --master-addr "
                    "and --master-port, and check the address, the port and the firewall (or raise --rdzv-timeout)")
            time.sleep(PROBE_S)
        self._next_probe, self._misses = 0.0, 0

    def lost(self) -> str | None:
        """Why it is gone (its exit code when this launcher runs it; else it refused ``PROBE_MISSES`` probes
        in a row, asked at most every ``PROBE_S``), or None while it lives."""
        if self.process is not None:
            code = self.process.poll()
            return None if code is None else f"exited (code {code})"
        now = time.monotonic()
        if now < self._next_probe:
            return None
        self._next_probe = now + PROBE_S
        reason = refused(self.host, self.port)
        self._misses = 0 if reason is None else self._misses + 1
        return f"at {self.endpoint} stopped answering ({reason})" if self._misses >= PROBE_MISSES else None

    def connected(self) -> bool:
        """Whether a replica group still holds a connection to the Lighthouse this launcher runs."""
        import psutil

        if self.process is None or self.process.poll() is not None:
            return False
        port = int(self.address.rsplit(":", 1)[1])
        try:
            process = psutil.Process(self.process.pid)
            # net_connections since psutil 6.0; connections before (pyproject takes any psutil).
            connections = getattr(process, "net_connections", None) or process.connections
            connections = connections(kind="tcp")
        except psutil.Error:
            return False
        return any(c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port for c in connections)

    def stop(self) -> None:
        """End the Lighthouse this launcher runs (SIGTERM: it shuts its server down)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait()

    def _kill(self) -> None:
        self.process.kill()
        self.process.wait()


def refused(host: str, port: int) -> str | None:
    """Why a TCP connection to ``host:port`` fails, or None when it is accepted."""
    try:
        socket.create_connection((host, port), timeout=2.0).close()
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    return None


def first_line(process: subprocess.Popen, timeout_s: float) -> str | None:
    """``process``'s first line of output, stripped ("" when it exited first); None when it printed no whole
    line within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    received = b""
    with selectors.DefaultSelector() as waiting:
        waiting.register(process.stdout, selectors.EVENT_READ)
        while b"\n" not in received:
            left = deadline - time.monotonic()
            if left <= 0 or not waiting.select(timeout=left):
                return None
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            received += chunk
    return received.split(b"\n", 1)[0].decode(errors="replace").strip()
