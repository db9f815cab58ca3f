"""Python stacks of a running process, for stall reports: all threads to the log, the main one in short."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import traceback

# Frames of these files are the machinery around the user's code, not where it stopped.
_MACHINERY = ("/threading.py", "/paratrain/diagnostics/")


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
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return "an unknown place (the main thread has no Python frame)"
    summary = [f for f in traceback.extract_stack(frame) if not f.filename.endswith(_MACHINERY)]
    shown = summary[-limit:]
    return " <- ".join(f"{f.name} ({os.path.basename(f.filename)}:{f.lineno}: {(f.line or '').strip()})"
                       for f in reversed(shown))
