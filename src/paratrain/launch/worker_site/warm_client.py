"""The worker torch's agent starts, when ``paratrain run --warm-workers`` keeps a warm pool: it hands itself
to the pool and waits.

The process the agent started stays exactly what torchrun starts (the same argv, environment, streams and
pid the agent watches), but it does not import torch: its ``sitecustomize`` sends the pool
(:mod:`paratrain.launch.warm_pool`, which imported torch once) its argv, working directory, environment,
``sys.path``, stream settings and its stdin/stdout/stderr descriptors (``SCM_RIGHTS``), and the pool forks
a child that becomes this worker (:mod:`paratrain.launch.warm_worker`). This process then

* forwards the signals the agent or a user sends it (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)
  to the child's process group, as torch's agent signals the group of a worker it started in a session
  of its own;
* exits as the child did: its exit code, or killed by the same signal;
* when it is itself SIGKILLed (the agent's last resort), takes the child with it: the pool sees the
  connection close and SIGKILLs the child's group.

Every wait is bounded (the connection, the pool's answer); when the pool is gone, refuses or does not
answer, :func:`run_in_pool` returns the reason and the caller starts this worker cold, as without the pool.
Only the standard library is imported here: this runs at interpreter start, before the script.
"""

from __future__ import annotations

import array
import io
import json
import os
import signal
import socket
import struct
import sys

#: The pool's socket, exported by the launcher to its workers (its absence: the cold start).
POOL_VAR = "PARATRAIN_WARM_POOL"
CONNECT_TIMEOUT_S = 5.0
#: The pool answers once it forked the child; at the job's start it is still importing torch then.
ANSWER_TIMEOUT_S = 120.0
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
#: The interpreter options a worker the pool can become was started with (torchrun: ``python -u``).
ACCEPTED_OPTIONS = ("-u",)
_HEADER = struct.Struct("!I")
_STREAMS = (0, 1, 2)


# ---- the messages: a length, then JSON; the request carries the three stream descriptors ------------------
def send_message(sock: socket.socket, message: dict, fds: tuple[int, ...] = ()) -> None:
    data = json.dumps(message).encode()
    frame = _HEADER.pack(len(data)) + data
    if fds:
        sent = sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        frame = frame[sent:]
    if frame:
        sock.sendall(frame)


def receive_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message and the descriptors that came with it; ``(None, [])`` when the peer closed first.

    Raises:
        OSError: the socket failed or timed out (``TimeoutError``).
        ValueError: not a message of this protocol.
    """
    fds: list[int] = []
    data = b""
    while len(data) < _HEADER.size:
        room = socket.CMSG_SPACE(4 * max_fds) if max_fds else 0
        chunk, ancillary, _, _ = sock.recvmsg(_HEADER.size - len(data), room)
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
                fds.extend(received)
        if not chunk:
            _close_all(fds)
            return None, []
        data += chunk
    (length,) = _HEADER.unpack(data)
    if length > 64 << 20:
        _close_all(fds)
        raise ValueError(f"a message of {length} bytes")
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            _close_all(fds)
            return None, []
        body += chunk
    try:
        message = json.loads(body)
    except ValueError:
        _close_all(fds)
        raise
    if not isinstance(message, dict):
        _close_all(fds)
        raise ValueError("a message that is not an object")
    return message, fds


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# ---- what this process tells the pool ----------------------------------------------------------------------
def target(orig_argv: list[str]) -> tuple[str, str] | None:
    """``("script", PATH)`` or ``("module", NAME)`` from the interpreter's own argv, when it was started
    as torchrun starts a worker (``python [-u] script.py …`` / ``python [-u] -m module …``); else None."""
    words = orig_argv[1:]
    while words and words[0] in ACCEPTED_OPTIONS:
        words = words[1:]
    if not words:
        return None
    if words[0] == "-m":
        return ("module", words[1]) if len(words) > 1 else None
    if words[0].startswith("-"):
        return None
    return "script", words[0]


def _stream(stream) -> dict | None:
    try:
        return {"encoding": stream.encoding, "errors": stream.errors, "line_buffering": stream.line_buffering,
                "write_through": stream.write_through,
                "buffered": not isinstance(getattr(stream, "buffer", None), io.FileIO)}
    except (AttributeError, ValueError):
        return None


def request() -> dict:
    """What the pool needs to make its child this worker (see :mod:`paratrain.launch.warm_worker`)."""
    ignored = []
    for number in signal.valid_signals():
        try:
            if signal.getsignal(number) == signal.SIG_IGN:
                ignored.append(int(number))
        except (ValueError, OSError):
            pass
    return {
        "argv": list(sys.argv), "orig_argv": list(sys.orig_argv), "cwd": os.getcwd(), "env": dict(os.environ),
        "path": list(sys.path), "executable": sys.executable, "version": sys.hexversion, "flags": list(sys.flags),
        "warnoptions": list(sys.warnoptions), "xoptions": {str(k): str(v) for k, v in sys._xoptions.items()},
        "streams": {"stdin": _stream(sys.stdin), "stdout": _stream(sys.stdout), "stderr": _stream(sys.stderr)},
        "ignored_signals": ignored, "cpus": sorted(os.sched_getaffinity(0)),
    }


# ---- the thin process --------------------------------------------------------------------------------------
def run_in_pool(path: str) -> str:
    """Have the pool at ``path`` run this worker and exit as it did (this call then never returns).

    Returns the reason, in words, when the pool cannot: nothing was started (or what was started is
    killed), so the caller goes on with the cold start.
    """
    if target(sys.orig_argv) is None:
        return f"cannot run a worker started as {' '.join(sys.orig_argv[:3])} …"
    pending: list[int] = []
    child = [0]

    def forward(number, frame):
        if child[0]:
            _signal_group(child[0], number)
        else:
            pending.append(number)

    previous = {number: signal.signal(number, forward) for number in FORWARDED_SIGNALS}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError as exc:
            return _give_up(sock, previous, pending, f"is not reachable at {path} ({exc.strerror or exc})")
        sock.settimeout(ANSWER_TIMEOUT_S)
        try:
            send_message(sock, request(), _STREAMS)
            answer, _ = receive_message(sock)
        except TimeoutError:
            return _give_up(sock, previous, pending, f"did not answer within {ANSWER_TIMEOUT_S:g} s")
        except Exception as exc:  # noqa: BLE001 (any failure here leaves the cold start, never a stuck handler)
            return _give_up(sock, previous, pending, f"failed ({type(exc).__name__}: {exc})")
        if answer is None or not isinstance(answer.get("pid"), int):
            reason = (answer or {}).get("refused") or "closed the connection"
            return _give_up(sock, previous, pending, f"refused this worker: {reason}")
        child[0] = answer["pid"]
        for number in pending:
            _signal_group(child[0], number)
        sock.settimeout(None)  # the child runs as long as the job: the agent watches this process meanwhile
        try:
            status, _ = receive_message(sock)
        except Exception:  # noqa: BLE001 (the pool is gone: said below)
            status = None
    finally:
        sock.close()
    if status is None:
        print(f"paratrain run: the warm worker pool ended before rank {os.environ.get('RANK')}'s worker "
              f"(pid {child[0]}); it was killed with the pool", file=sys.stderr, flush=True)
        status = {"signal": int(signal.SIGKILL)}
    _exit_as(status)


def _give_up(sock: socket.socket, previous: dict, pending: list[int], reason: str) -> str:
    sock.close()  # a child the pool forked for us dies with the connection
    for number, handler in previous.items():
        signal.signal(number, handler if handler is not None else signal.SIG_DFL)
    for number in pending:  # a stop that came during the handshake: as the cold process would have got it
        signal.raise_signal(number)
    return reason


def _signal_group(pid: int, number: int) -> None:
    try:
        os.killpg(pid, number)
    except ProcessLookupError:
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            pass
    except PermissionError:
        pass


def _exit_as(status: dict) -> None:
    """End this process as the child ended: the same exit code, or the same signal. Never returns (the
    script ran in the child: whatever happens here, this process must not run it again)."""
    number = status.get("signal")
    if isinstance(number, int) and number > 0:
        import resource

        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the child's core, if any, is the one that matters
            if number not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
            os.kill(os.getpid(), number)
        except (OSError, ValueError):
            pass
        os._exit(128 + number)
    code = status.get("exit")
    os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)
