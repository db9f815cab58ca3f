"""A warm pool of workers on each node (``paratrain run --warm-workers``): torch imported once, a fork per worker.

A worker's start-up is mostly torch's imports: ``import torch`` (about 1 s of CPU), paratrain's worker
modules, and ``torch._dynamo``, which the first optimizer imports (``torch.optim`` wraps its methods in
``torch._disable_dynamo``; about 1 s more). A restart of the group pays them again in every worker.
The pool pays them once per launch:

* the launcher binds a Unix socket (``0600``, in a ``0700`` folder of its own) and starts this module
  (:class:`WarmPool`) before torch's agent, with the workers' environment; it imports torch,
  ``torch.distributed``, ``torch._dynamo``, ``torch.distributed.checkpoint`` and paratrain's worker
  modules (:data:`PRELOADED`) — no torch operation, no thread of its own, CUDA untouched, so a fork of
  it is sound — and then serves the socket;
* each worker the agent starts is what torchrun starts (its argv, environment and pid), but its
  ``sitecustomize`` does not import torch: it sends its argv, environment and streams here
  (:mod:`paratrain.launch.worker_site.warm_client`) and waits;
* the pool forks a child per request; the child makes itself that worker
  (:mod:`paratrain.launch.warm_worker`) and runs the script; the pool tells the waiting process the
  child's pid, then its exit status, which that process ends with.

Lifetimes: the pool dies with the launcher (``PR_SET_PDEATHSIG``, and the end of a pipe the launcher
holds: the launcher's normal end closes it and the pool stops its children and exits); each child dies
with the pool (``PR_SET_PDEATHSIG``) and with the process the agent started (the connection closing
before the child ended: the child's process group is SIGKILLed). A request the pool cannot serve as a
cold start would (another interpreter or interpreter options, a pool whose imports failed) is refused
in words, and that worker starts cold.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from paratrain.launch.worker_site.warm_client import POOL_VAR, receive_message, send_message, target

#: What a worker imports that the pool imports for it; one that fails to import here is skipped (the worker meets it).
PRELOADED = (
    "torch", "torch.distributed", "torch._dynamo", "torch.optim", "torch.nn.parallel", "torch.utils.data",
    "torch.distributed.checkpoint", "torch.distributed.elastic.multiprocessing.errors",
    "paratrain.runtime.runtime", "paratrain.strategy", "paratrain.precision", "paratrain.data.loader",
    "paratrain.checkpoint.checkpointer", "paratrain.loop.fit", "paratrain.goodput.ledger", "paratrain.tasks.registry",
)
#: How long the launcher waits for the pool to end once asked (then it is killed).
STOP_TIMEOUT_S = 5.0
#: How long the pool waits for a connected worker's request before dropping it.
REQUEST_TIMEOUT_S = 10.0
SOCKET_NAME = "pool.sock"
MAX_SOCKET_PATH = 100


class WarmPool:
    """The launcher's handle on this node's pool: started on ``__enter__`` with ``environ`` (default: the
    current environment, the workers'), stopped on ``__exit__`` (bounded: :data:`STOP_TIMEOUT_S`, then
    SIGKILL). :attr:`env` is what the workers need to find it."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = None if environ is None else dict(environ)
        self.folder = tempfile.mkdtemp(prefix="paratrain-warm-")
        if len(os.path.join(self.folder, SOCKET_NAME)) > MAX_SOCKET_PATH:  # a long TMPDIR: sun_path is 108 bytes
            os.rmdir(self.folder)
            self.folder = tempfile.mkdtemp(prefix="paratrain-warm-", dir="/tmp")
        self.path = os.path.join(self.folder, SOCKET_NAME)
        self.process: subprocess.Popen | None = None
        self._control: int | None = None

    @property
    def env(self) -> dict[str, str]:
        return {POOL_VAR: self.path}

    def __enter__(self) -> WarmPool:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.path)
            os.chmod(self.path, 0o600)
            listener.listen(64)  # bound before any worker starts: an early worker waits in the backlog
            read_end, self._control = os.pipe()
            try:
                self.process = subprocess.Popen(
                    [sys.executable, "-u", "-m", "paratrain.launch.warm_pool", str(listener.fileno()),
                     str(read_end), str(os.getpid())],
                    pass_fds=(listener.fileno(), read_end), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    env=self.environ,
                    start_new_session=True,  # a Ctrl-C on the terminal reaches the launcher, not the pool
                )
            finally:
                os.close(read_end)
        except BaseException:
            self.__exit__()
            raise
        finally:
            listener.close()  # the pool holds it now: a pool that died refuses connections at once
        return self

    def __exit__(self, *exc) -> None:
        if self._control is not None:
            os.close(self._control)  # the pool's signal to stop its children and end
            self._control = None
        if self.process is not None:
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


# ---- the pool process ----------------------------------------------------------------------------------------
@dataclass
class Child:
    pid: int
    pidfd: int
    connection: socket.socket | None


@dataclass
class Request:
    """A worker to become, in the forked child: what the waiting process sent, its streams, its pid."""

    message: dict
    streams: list[int]
    waiting_pid: int
    pool_pid: int
    pool_environ: dict[str, str] = field(default_factory=dict)


def preload() -> str | None:
    """Import :data:`PRELOADED`; the reason the pool cannot fork soundly, else None."""
    import importlib

    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (an optional extra, a broken one: the worker imports it, or fails, itself)
            continue
    if threading.active_count() != 1:
        return f"importing torch started threads ({', '.join(t.name for t in threading.enumerate())})"
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch could not be imported"
    if torch.cuda.is_initialized():
        return "CUDA was initialised while importing"
    return None


class Pool:
    """Serves the socket until the launcher's pipe closes. Single-threaded (a fork copies one thread):
    one selector over the socket, the pipe, each child's pidfd and each waiting process's connection."""

    def __init__(self, listener: socket.socket, control: int, unfit: str | None):
        self.listener = listener
        self.control = control
        self.unfit = unfit
        self.children: dict[int, Child] = {}
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.selector.register(control, selectors.EVENT_READ, "control")
        self.environ = dict(os.environ)

    def serve(self) -> Request | None:
        """Returns a :class:`Request` in a forked child (which then becomes that worker), None in the pool
        when the launcher asked it to end (its children are killed first)."""
        while True:
            for key, _ in self.selector.select():
                kind = key.data
                if kind == "control":
                    self.stop()
                    return None
                if kind == "accept":
                    request = self.accept()
                    if request is not None:
                        return request
                elif kind[0] == "exited":
                    self.reap(kind[1])
                elif kind[0] == "connection":
                    self.connection_event(kind[1])

    def accept(self) -> Request | None:
        try:
            connection, _ = self.listener.accept()
        except OSError:
            return None
        try:
            connection.settimeout(REQUEST_TIMEOUT_S)
            message, streams = receive_message(connection, max_fds=3)
            pid, uid, _ = _peer(connection)
        except (OSError, ValueError):
            connection.close()
            return None
        if message is None:
            connection.close()
            return None
        refusal = self.refusal(message, streams, uid)
        if refusal:
            _close_all(streams)
            with contextlib.suppress(OSError):
                send_message(connection, {"refused": refusal})
            connection.close()
            return None
        child = os.fork()
        if child == 0:
            connection.close()  # the waiting process's end stays the pool's: its close is what kills the child
            return self.in_child(Request(message, streams, pid, os.getppid(), self.environ))
        _close_all(streams)
        pidfd = os.pidfd_open(child)
        self.children[child] = Child(child, pidfd, connection)
        try:
            send_message(connection, {"pid": child})
        except OSError:  # the waiting process is gone already
            self.connection_lost(child)
        self.selector.register(pidfd, selectors.EVENT_READ, ("exited", child))
        if self.children[child].connection is not None:
            self.selector.register(connection, selectors.EVENT_READ, ("connection", child))
        return None

    def refusal(self, message: dict, streams: list[int], uid: int) -> str | None:
        if self.unfit:
            return self.unfit
        if uid != os.getuid():
            return f"its user (uid {uid}) is not the pool's"
        if len(streams) != 3:
            return "its streams did not arrive"
        if message.get("executable") != sys.executable or message.get("version") != sys.hexversion:
            return f"it runs {message.get('executable')}, the pool {sys.executable}"
        if (message.get("flags") != list(sys.flags) or message.get("warnoptions") != list(sys.warnoptions)
                or message.get("xoptions") != {str(k): str(v) for k, v in sys._xoptions.items()}):
            return "it was started with other interpreter options than the pool (-X, -W, -O, PYTHON* variables)"
        if target(list(message.get("orig_argv") or [])) is None:
            return "it was not started as python [-u] script.py or python [-u] -m module"
        return None

    def in_child(self, request: Request) -> Request:
        """Right after the fork, in the child: let go of the pool's sockets and children, take a session of
        its own (torch's agent starts every worker in one), die with the pool."""
        from paratrain.runtime.launcher_death import die_with_parent

        self.selector.close()
        self.listener.close()
        os.close(self.control)
        for child in self.children.values():
            os.close(child.pidfd)
            if child.connection is not None:
                child.connection.close()
        os.setsid()
        die_with_parent(request.pool_pid)
        return request

    def connection_event(self, pid: int) -> None:
        child = self.children.get(pid)
        if child is None or child.connection is None:
            return
        try:
            data = child.connection.recv(4096)
        except OSError:
            data = b""
        if not data:  # the process the agent started is gone (SIGKILL): its child goes with it
            self.connection_lost(pid)

    def connection_lost(self, pid: int) -> None:
        child = self.children[pid]
        _kill_group(pid)
        if child.connection is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(child.connection)
            child.connection.close()
            child.connection = None

    def reap(self, pid: int) -> None:
        child = self.children.pop(pid)
        self.selector.unregister(child.pidfd)
        os.close(child.pidfd)
        _, status = os.waitpid(pid, 0)
        if child.connection is None:
            return
        if os.WIFSIGNALED(status):
            result = {"signal": os.WTERMSIG(status)}
        else:
            result = {"exit": os.waitstatus_to_exitcode(status)}
        with contextlib.suppress(OSError):
            send_message(child.connection, result)
        self.selector.unregister(child.connection)
        child.connection.close()

    def stop(self) -> None:
        """The launcher ended: its agent stopped the workers; a child still running is killed."""
        for pid in list(self.children):
            _kill_group(pid)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for pid in list(self.children):
            while time.monotonic() < deadline:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.01)


def _peer(connection: socket.socket) -> tuple[int, int, int]:
    import struct

    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", credentials)


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def main(argv: list[str]) -> int:
    """``python -u -m paratrain.launch.warm_pool SOCKET_FD PIPE_FD LAUNCHER_PID`` (started by :class:`WarmPool`)."""
    from paratrain.runtime.launcher_death import die_with_parent

    listener_fd, control, launcher = (int(word) for word in argv)
    die_with_parent(launcher)
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd():
        del sys.path[0]  # -m put the launcher's folder first; a worker's first entry is its script's
    unfit = preload()
    listener = socket.socket(fileno=listener_fd)
    request = Pool(listener, control, unfit).serve()
    if request is None:
        # The launcher is ending and waits for this process: nothing here needs tidying (its children are
        # reaped, the launcher removes the socket's folder), and the teardown of an interpreter holding torch
        # takes seconds on a busy machine (9 s at a load average of 22: longer than STOP_TIMEOUT_S).
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)
    from paratrain.launch import warm_worker

    return warm_worker.become(request)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
