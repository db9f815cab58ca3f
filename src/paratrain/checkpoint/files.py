"""Durable files: fsync, atomic replace, checksums, and removal that never leaves a
half-deleted checkpoint looking complete.

A rename is atomic, but only durable once the directory holding it is fsynced:
without that a power cut can bring back the old name (see ext4's
``auto_da_alloc`` notes and LWN's "ext4 and data loss"). Every step that makes a
checkpoint visible is therefore: write, fsync the file, rename, fsync the directory.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import sys
import time
import uuid
import zlib
from pathlib import Path

from paratrain.errors import CheckpointError, MissingDependencyError

#: Test hook: ``SECONDS`` or ``SECONDS@STEP`` pauses every save (or the save of STEP)
#: after its data files are written and before it is marked complete, so a test can
#: kill the writer exactly there; ``SECONDS@STEP:prepared`` / ``:sealed`` pause at the other
#: moments of :func:`pause_if_requested`.
PAUSE_ENV = "PARATRAIN_TEST_PAUSE_IN_SAVE"

_CHUNK = 1 << 20


def fsync_path(path: Path) -> None:
    """Flush a file's (or a directory's) contents to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems (and directories on some platforms) cannot fsync; the
        # write itself succeeded, so only durability against power loss is weaker.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a part.

    Raises:
        OSError: the write failed; ``path`` is unchanged and no temporary file is left.
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    temporary = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(temporary, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def crc32_file(path: Path) -> str:
    """CRC-32 (zlib's polynomial) of a file's bytes, eight hex digits: the checksum of format 2 and 3, and of
    format 4 where no hardware CRC-32C is at hand (see :func:`data_checksum`)."""
    checksum = 0
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            checksum = zlib.crc32(block, checksum)
    return f"{checksum:08x}"


def crc32c_file(path: Path) -> str:
    """CRC-32C (Castagnoli) of a file's bytes, eight hex digits, by google-crc32c (the CPU's CRC instruction
    where it has one; its slow pure-Python fallback otherwise, which still verifies correctly).

    Raises:
        MissingDependencyError: google-crc32c is not installed (paratrain depends on it; a checkout run with
            ``PYTHONPATH=src`` may lack it). Not a :class:`CheckpointError`: the file is not damaged, and a resume
            must stop here rather than set the checkpoint aside as damaged.
    """
    try:
        import google_crc32c
    except ImportError as exc:
        raise MissingDependencyError("google-crc32c", "", f"verifying {path} (checksummed with CRC-32C)",
                                     install="google-crc32c (a dependency of paratrain)") from exc

    checksum = google_crc32c.Checksum()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            checksum.update(block)
    return checksum.digest().hex()


def data_checksum(path: Path) -> tuple[str, str]:
    """``(kind, hex)``: the checksum a checkpoint's data file gets when it is sealed — CRC-32C where the CPU
    computes it (SSE 4.2, ARMv8: about 20 GB/s, six times zlib's CRC-32 here, and a background save's CPU is what it
    costs training), else CRC-32.

    Either must catch accidental damage — a bit flipped on the disk or in a copy, a torn or partial write (a
    block of zeros or of stale data after a crash or a full disk), a file of another checkpoint in its place (a
    truncated or extended file is caught by its size first). Both catch every burst of up to 32 flipped bits and
    miss other random damage with probability 2**-32; neither is a signature, and neither was SHA-256 here
    (whoever can edit a file can rewrite the manifest and ``COMPLETE``).
    """
    if _hardware_crc32c():
        return "crc32c", crc32c_file(path)
    return "crc32", crc32_file(path)


def _hardware_crc32c() -> bool:
    try:
        import google_crc32c
    except ImportError:
        return False
    return google_crc32c.implementation == "c"


def remove_tree(path: Path, marker: str) -> None:
    """Delete a checkpoint directory, its completion ``marker`` first.

    If the process dies halfway, what is left has no marker and is ignored, instead
    of looking like a complete checkpoint with files missing.
    """
    marker_path = Path(path) / marker
    if marker_path.exists():
        marker_path.unlink()
        fsync_path(path)
    shutil.rmtree(path, ignore_errors=True)


def describe_os_error(exc: OSError, doing: str) -> str:
    """One line for an OSError met while ``doing`` something, with the usual fix."""
    where = f" {exc.filename}" if exc.filename else ""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        fix = "free disk space, lower keep_last, or write checkpoints to a bigger disk"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "the directory is read-only for this user: choose a writable directory or fix its permissions"
    else:
        fix = "check the disk and the path"
    return f"{doing}:{where}: {reason}; {fix}"


def check_writable_directory(directory: Path) -> None:
    """Create ``directory`` if needed and prove a file can be created in it.

    Raises:
        CheckpointError: it is a file, cannot be created, or is read-only.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} is a file; pass a directory path")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test-{uuid.uuid4().hex[:8]}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise CheckpointError(describe_os_error(exc, f"cannot write checkpoints to {directory}")) from exc


def pause_if_requested(step: int | None, where: Path, moment: str = "written") -> None:
    """Sleep here when the test hook :data:`PAUSE_ENV` asks for it (see its comment). ``SECONDS@STEP:MOMENT``
    picks the moment of the save: ``prepared`` (its hidden directory made, nothing in it), ``written``
    (the default: every file written, nothing sealed), ``sealed`` (``COMPLETE`` written, not renamed yet)."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    seconds, _, only_step = spec.partition("@")
    only_step, _, wanted = only_step.partition(":")
    if (wanted or "written") != moment:
        return
    if only_step and (step is None or int(only_step) != step):
        return
    print(f"paratrain: {PAUSE_ENV}: pausing {seconds}s while writing {where}", file=sys.stderr, flush=True)
    time.sleep(float(seconds))
