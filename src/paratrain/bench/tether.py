"""Run one command so that it, and every process it starts, dies with the bench.

The bench starts each method in a session of its own, so that a timeout can end the
whole tree at once; but a session of its own also escapes the signals that end the
bench's (a scheduler's ``kill -9`` of the job's process group, the OOM killer taking
the bench alone). This file sits between the two:

    python -I tether.py COMMAND...        (stdin: a pipe whose other end the bench holds)

It starts COMMAND, and ends COMMAND's whole tree when the pipe closes (the kernel
closes it when the bench dies, however it dies), when it gets SIGTERM or SIGINT, and
after COMMAND exits (what a launcher leaves behind goes too). As a Linux child
subreaper, it keeps the descendants whose parent died as its own children, so none
escapes the count. It exits as COMMAND did (the same code, or the same signal).

Runs with ``-I`` from this file, importing only the standard library and psutil: it
starts before a method's clock would notice, and the folder it lies in (the bench's
modules) is not put on ``sys.path``.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading

import psutil

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
GRACE_S = 3.0


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process instead of init (Linux; else nothing)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def end_descendants(grace_s: float) -> None:
    """SIGTERM to every descendant, then SIGKILL to those still alive after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            alive = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        if not alive:
            return
        for process in alive:
            try:
                process.send_signal(sig)
            except psutil.Error:
                pass
        if sig == signal.SIGTERM and grace_s > 0:
            psutil.wait_procs(alive, timeout=grace_s)
    psutil.wait_procs(psutil.Process().children(recursive=True), timeout=GRACE_S)  # reap


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -I tether.py COMMAND...\n")
        return 2
    become_subreaper()
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    lock = threading.RLock()  # SIGTERM may arrive while the main thread holds it

    def stop(*_):
        with lock:
            end_descendants(GRACE_S)

    def watch_parent():
        while os.read(0, 1024):  # unbuffered: a buffered reader's lock would hold up the exit
            pass
        stop()  # the pipe closed: the bench is gone, or wants the method gone

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=watch_parent, daemon=True).start()
    code = child.wait()
    with lock:
        end_descendants(0.0)  # the launcher has exited: what it left behind is litter
    if code < 0:  # die of the same signal, so the bench reads the same status
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
