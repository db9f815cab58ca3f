"""One writer per run directory: a lock file held for the run's whole life.

Two runs writing into one directory interleave their metrics, overwrite each other's
checkpoints and leave one's failure report beside the other's summary. The holder keeps
an exclusive ``flock`` on ``DIR/.paratrain-lock`` (the kernel drops it when the process
dies, however it dies; NFSv4 carries it across machines) and writes who it is into the
file: pid, host, start time and command, so a refused run can name the holder.

The holder removes the file when it releases the lock; a lock file that nobody holds
was left by a process that died without releasing it (SIGKILL, a lost node): the next
run takes it over and says so. Within one process the lock is shared (a save and a resume of one
run, or a Checkpointer inside the fit loop, are one writer), counted and released by
the last user.

``PARATRAIN_RUN_LOCK`` names a directory that this process's launcher already holds
(``paratrain train`` locks ``--out`` before it starts the workers): its workers write
into it without locking it again.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from paratrain.env.torchelastic import parent_launcher
from paratrain.errors import ParatrainError, RunDirectoryBusyError
from paratrain.no_follow import open_fd

LOCK_FILE = ".paratrain-lock"
HELD_BY_LAUNCHER_ENV = "PARATRAIN_RUN_LOCK"

_held: dict[str, _Held] = {}  # resolved directory → this process's lock on it
_guard = threading.Lock()


@dataclass
class _Held:
    fd: int
    users: int


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a directory's lock, as written in the lock file."""

    pid: int | None = None
    host: str = "?"
    started: float | None = None
    command: str = ""

    @classmethod
    def read(cls, text: str) -> Holder | None:
        try:
            data = json.loads(text)
            return cls(pid=data.get("pid"), host=data.get("host", "?"), started=data.get("started"),
                       command=data.get("command", ""))
        except (ValueError, AttributeError):
            return None

    @classmethod
    def this_process(cls) -> Holder:
        return cls(pid=os.getpid(), host=socket.gethostname(), started=time.time(), command=" ".join(sys.argv)[:300])

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started)) if self.started else "an unknown time"
        command = f": {self.command}" if self.command else ""
        return f"pid {self.pid} on {self.host}, started {when}{command}"


class WriterLock:
    """This process's hold on ``directory`` (created if missing). Use as a context manager,
    or :meth:`acquire` / :meth:`release`. Not collective: take it on the one writing rank.

    Raises (from :meth:`acquire`):
        RunDirectoryBusyError: another live process holds it; names that process.
        OSError: the directory or the lock file cannot be created.
    """

    def __init__(self, directory: str | Path, what: str = "run directory"):
        self.directory = Path(directory)
        self.what = what
        self.took_over: Holder | None = None  # a dead holder whose lock this one took over
        self._key: str | None = None

    @property
    def held(self) -> bool:
        return self._key is not None

    def acquire(self) -> WriterLock:
        if self._key is not None:
            return self
        if held_by_launcher(self.directory):
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        key = str(self.directory.resolve())
        with _guard:
            held = _held.get(key)
            if held is not None:  # this process already writes here
                held.users += 1
                self._key = key
                return self
            fd = self._lock_file()
            previous = Holder.read(_read_all(fd))
            if previous is not None and previous.pid is not None:
                self.took_over = previous
            _write_all(fd, json.dumps(Holder.this_process().__dict__) + "\n")
            _held[key] = _Held(fd=fd, users=1)
            self._key = key
        return self

    def _lock_file(self) -> int:
        """Open and lock the lock file; return its descriptor. A holder removes the file when it
        releases, so a lock won on a file that was removed meanwhile is retried on the new one."""
        path = self.directory / LOCK_FILE
        while True:
            fd = open_fd(path, os.O_RDWR | os.O_CREAT, 0o644)  # a planted link: refused in one line
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = Holder.read(_read_all(fd))
                os.close(fd)
                who = holder.describe() if holder else "another process"
                raise RunDirectoryBusyError(
                    f"{self.directory} is in use by another paratrain run ({who}); two runs in one {self.what} "
                    "would overwrite each other's checkpoints and metrics: wait for it to end (or stop it), "
                    "or use another output directory"
                ) from None
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)  # the previous holder removed it between our open and our lock

    def release(self) -> None:
        """Give the lock up (the last user in this process empties the file and unlocks it)."""
        key, self._key = self._key, None
        if key is None:
            return
        with _guard:
            held = _held.get(key)
            if held is None:
                return
            held.users -= 1
            if held.users > 0:
                return
            del _held[key]
            try:  # removed while still locked: a released directory holds no lock file
                (Path(key) / LOCK_FILE).unlink()
            except OSError:
                pass
            fcntl.flock(held.fd, fcntl.LOCK_UN)
            os.close(held.fd)

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def took_over_text(self) -> str | None:
        """The line to print when a dead holder's lock was taken over, else None."""
        if self.took_over is None:
            return None
        return (f"{self.directory}: the previous run ({self.took_over.describe()}) ended without releasing "
                "the directory (killed?); this run takes it over")


def held_by_launcher(directory: str | Path) -> bool:
    """True when this process's launcher holds the lock on ``directory`` for it: ``PARATRAIN_RUN_LOCK``
    names it, and its lock file is locked by this process's parent (a warm worker: the pool's parent,
    :func:`~paratrain.env.torchelastic.parent_launcher`). The variable alone proves nothing:
    leaked into a shell (or a script's environment), it would let a second run write into a live one."""
    held = os.environ.get(HELD_BY_LAUNCHER_ENV)
    if not held or Path(held).resolve() != Path(directory).resolve():
        return False
    try:
        fd = open_fd(Path(directory) / LOCK_FILE, os.O_RDONLY)
    except (OSError, ParatrainError):
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # locked: by our launcher only if the file names it
            holder = Holder.read(_read_all(fd))
            return holder is not None and holder.pid == parent_launcher()
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False  # nobody holds it: the variable is stale
    finally:
        os.close(fd)


def _read_all(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _write_all(fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, text.encode())
    os.fsync(fd)
