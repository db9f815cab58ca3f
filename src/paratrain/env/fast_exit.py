"""End a process whose work is done without the interpreter's teardown.

After ``main`` returns, Python ends a process in steps: it joins the threads that are not daemons, runs the
``atexit`` handlers, flushes ``sys.stdout``/``sys.stderr``, then tears the interpreter down — every module's
globals cleared, every object left collected (torch's tensors, gloo and CUDA objects, the DDP reducer), C++
static destructors. In a process holding torch that last part takes seconds on a loaded machine
(docs/goodput.md, "Stop and exit after a fault"): time in which a preempted job's launcher has not yet exited
and the next one cannot start. It frees nothing that outlives the process: the kernel takes back its memory,
descriptors and the GPU's context either way.

:func:`exit_without_teardown` keeps the first steps and skips the last: the threads joined, every
``atexit`` handler run (a user's own, logging's shutdown, ``weakref.finalize``'s, multiprocessing's end of
its children, a :class:`pt.Runtime` leaving its process group), every open file Python holds flushed,
then ``os._exit(code)``. What is lost is only what an object's ``__del__`` would have done at teardown
beyond flushing a file.

Only the processes whose code paratrain owns end this way: ``paratrain run`` / ``paratrain train``'s
launcher (``python -m paratrain``, the ``paratrain`` command) and ``paratrain train``'s workers (a task
file's code runs there too: its atexit handlers run and its open files are flushed). A user's own script
under ``paratrain run`` — ``pt.fit`` or ``pt.Runtime`` in it included — keeps Python's normal exit: its
objects' finalizers are its own.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys
import threading
from typing import NoReturn


def exit_without_teardown(code: int) -> NoReturn:
    """Run what a normal exit would run before the interpreter's teardown, then end with ``code``.

    Joins the threads that are not daemons (as the interpreter does, without a limit), runs every
    ``atexit`` handler (an exception in one is printed, as at a normal exit), flushes every open
    writable file object, ``sys.stdout`` and ``sys.stderr`` last, and calls ``os._exit(code)``. Local:
    nothing collective. Call it from the main thread only, once the process's work is done.

    Raises:
        TypeError: ``code`` is not an int (what ``sys.exit`` would print instead of exiting with it).
    """
    if isinstance(code, bool) or not isinstance(code, int):
        raise TypeError(f"exit_without_teardown() takes an int exit code, not {code!r}")
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        # The interpreter's own first step at exit: the threading module's exit callbacks (an executor
        # never shut down wakes its threads there), then every thread that is not a daemon joined.
        shutdown()
    else:  # an interpreter without it: the joins alone
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon and thread.is_alive():
                thread.join()
    atexit._run_exitfuncs()  # the public atexit has no other way to run them; each runs once, here
    _flush_open_files()
    os._exit(code % 256)  # what the operating system keeps of any exit code


def _flush_open_files() -> None:
    """Flush every writable file object still open (a file a script opened and never closed would be
    flushed when the teardown collects it), then the standard streams."""
    kinds = (io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper)
    for obj in gc.get_objects():
        # type(), not isinstance(): the latter reads __class__, which some objects compute (torch's
        # deprecated aliases warn then).
        if type(obj) in kinds and obj is not sys.stdin:
            try:
                if not obj.closed and obj.writable():
                    obj.flush()
            except (OSError, ValueError, AttributeError):
                pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
