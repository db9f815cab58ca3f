"""Python stacks of a running process, for stall reports: all threads to the log, the main one in short;
and the main thread's frames read back from a faulthandler dump (a worker stopped by the launcher)."""

from __future__ import annotations

import faulthandler
import linecache
import os
import re
import sys
import threading
import traceback
import types

# Frames of these files are the machinery around the user's code, not where it stopped: threads, paratrain's
# diagnostics, runpy (python -m), and in a warm worker the pool that forked it and ran the script
# (launch/warm_pool.py, warm_worker.py).
_MACHINERY = ("/threading.py", "/paratrain/diagnostics/", "<frozen runpy>", "/paratrain/launch/warm_pool.py",
              "/paratrain/launch/warm_worker.py")
# An innermost frame in these files waits for other ranks: torch.distributed's collectives,
# stores and FSDP's all-gathers, or the autograd engine, where DDP's reducer waits for the
# gradient all-reduce (a backward that lasts a whole stall timeout is that wait, not arithmetic).
_COLLECTIVE_FILES = ("/torch/distributed/", "/torch/autograd/graph.py", "/torch/autograd/__init__.py")

# Defensive: a frame read and a fork (a DataLoader starting its workers) never overlap. CPython
# already keeps them apart (both need the GIL, and 3.11 re-creates the thread-list lock in the
# child); 2000 forks against 147 M frame reads without this lock did not hang. It costs one
# uncontended lock per read, so it stays, in case another interpreter is less careful.
_FRAMES = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_FRAMES.acquire, after_in_parent=_FRAMES.release, after_in_child=_FRAMES.release)


def _main_thread_frame() -> types.FrameType | None:
    with _FRAMES:
        return sys._current_frames().get(threading.main_thread().ident)


def dump_all_threads(header: str, file=None) -> None:
    """Write every thread's stack to ``file`` (default stderr, i.e. the rank's log) with faulthandler.

    faulthandler writes from C and needs no lock, so it works while another thread is stuck.
    """
    out = file or sys.stderr
    try:
        out.write(f"\n{header}\n")
        out.flush()
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.flush()
    except (OSError, ValueError):  # a closed or unusable stream: the report still goes out
        pass


def main_thread_frames(limit: int = 3) -> str:
    """The innermost ``limit`` frames of the main thread, innermost last, as one line."""
    frame = _main_thread_frame()
    if frame is None:
        return "an unknown place (the main thread has no Python frame)"
    summary = [f for f in traceback.extract_stack(frame) if not f.filename.endswith(_MACHINERY)]
    shown = summary[-limit:]
    return " <- ".join(f"{f.name} ({os.path.basename(f.filename)}:{f.lineno}: {(f.line or '').strip()})"
                       for f in reversed(shown))


def main_thread_collective() -> types.FrameType | None:
    """The main thread's innermost frame when it is inside a collective (see above), else None.

    Cheap (one look at the main thread's frames, no formatting): the watchdog asks at every
    publication. The same frame object seen again is the same call still waiting (a caller
    that keeps it cannot see its memory reused by the next call, as an ``id()`` could be).
    """
    frame = _main_thread_frame()
    if frame is None:
        return None
    return frame if _waits(frame.f_code.co_filename, frame.f_lineno) else None


def _waits(filename: str, line: int | None) -> bool:
    """The innermost Python frame ``filename:line`` waits for other ranks: it is in torch's
    collectives or autograd engine, or its line calls a C-implemented ``.wait(``, i.e. a torch
    ``Work`` or store (Python-level waits, threading's or subprocess's, have frames of their own)."""
    filename = filename.replace("\\", "/")
    if any(part in filename for part in _COLLECTIVE_FILES):
        return True
    # f_lineno is None between some instructions (Python 3.11+): no line, no evidence.
    return isinstance(line, int) and ".wait(" in linecache.getline(filename, line)


def _machinery(filename: str) -> bool:
    return filename.endswith(_MACHINERY[0]) or any(part in filename for part in _MACHINERY[1:])


_DUMP_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+)$')


def main_thread_in_dump(text: str) -> list[tuple[str, int, str]]:
    """The main thread's frames (file, line, function; innermost first) in a faulthandler dump
    of all threads, or ``[]``. The main thread is the one whose stack starts at ``<module>``
    (the script) or at runpy (``-m``)."""
    threads: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append([])
            continue
        match = _DUMP_FRAME.match(line)
        if match and threads:
            threads[-1].append((match.group(1), int(match.group(2)), match.group(3)))
    for frames in threads:
        if frames and frames[-1][2] in ("<module>", "_run_module_as_main"):
            return frames
    return []


def frames_wait(frames: list[tuple[str, int, str]]) -> bool:
    """The innermost of these frames waits for other ranks (see :func:`_waits`)."""
    return bool(frames) and _waits(frames[0][0], frames[0][1])


def describe_frames(frames: list[tuple[str, int, str]], limit: int = 3) -> str:
    """``f (file.py:12: the line) <- g (...)``: the innermost ``limit`` frames, as the watchdog writes them."""
    shown = [f for f in frames if not _machinery(f[0].replace("\\", "/"))][:limit]
    return " <- ".join(
        f"{name} ({os.path.basename(path)}:{line}: {linecache.getline(path, line).strip()})" for path, line, name in shown
    )
