"""Opening a run directory's files without following links.

A run directory may come from elsewhere (a shared disk, a received folder), and anyone who can write
into it can plant a symbolic link named like one of its files: ``.paratrain-lock`` → a file of yours
would be truncated and rewritten, ``metrics.jsonl`` or ``logs/rank0.log`` → the run would append
outside its folder. paratrain opens each such file with ``O_NOFOLLOW`` and checks that it is a regular
file (a FIFO would block the open: ``O_NONBLOCK``, which regular files ignore), and refuses in one line.
Directories are followed: a ``checkpoints`` folder linked to a bigger disk is the user's own doing.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from paratrain.errors import ConfigError, ParatrainError


def open_fd(path: Path | str, flags: int, mode: int = 0o644, error: type[ParatrainError] = ConfigError) -> int:
    """``os.open(path, flags)`` that refuses a symbolic link or anything but a regular file.

    Raises:
        ``error`` (ConfigError by default): ``path`` is a link or not a regular file (a FIFO, a socket, a
            directory); names it and the fix.
        OSError: any other failure of the open.
    """
    not_regular = error(f"{path} is not a regular file; paratrain writes and reads only regular files in a run "
                        "directory: remove it (or use another directory)")
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"{path} is a symbolic link (to {os.readlink(path)}); paratrain never follows a link to "
                        "a file in a run directory: remove the link (or use another directory)") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO without a reader, a socket; a directory
            raise not_regular from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise not_regular
    os.set_blocking(fd, True)
    return fd


def open_text(path: Path | str, mode: str, error: type[ParatrainError] = ConfigError, **options):
    """Like ``open(path, mode)`` for ``"r"``, ``"a"`` or ``"w"`` (text), without following links (:func:`open_fd`)."""
    flags = {"r": os.O_RDONLY, "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
             "w": os.O_WRONLY | os.O_TRUNC | os.O_CREAT}[mode]
    return os.fdopen(open_fd(path, flags, error=error), mode, **options)


def regular_file(path: Path | str) -> bool:
    """``path`` is a regular file itself (not a link to one)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
