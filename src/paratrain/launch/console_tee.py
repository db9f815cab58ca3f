"""The launcher's console copy of workers' output (``--tee``), one whole line at a time.

torch elastic's ``--tee`` copies each worker's log file to the console with
``tail_logfile``, which writes whatever ``readline`` returns behind the rank's tag —
also the first part of a line whose rest is not in the file yet. A worker that writes
a line in parts (an unbuffered ``print(a, b)`` is three writes) then shows up as
``[rank0]:part-a`` and ``[rank0]: part-b`` merged into the next rank's line whenever
the tailing thread runs between the writes, which a loaded machine makes common.
:func:`tail_whole_lines` holds a partial line until its newline arrives, or for at most
:data:`HOLD_S` (a progress bar redrawn with ``\\r`` still shows). A line that starts
with the rank's tag already (torch's excepthook, torch's log formatter) gets it once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from threading import Event
from typing import TextIO

from torch.distributed.elastic.multiprocessing import tail_log

# On a terminal each tagged line first clears the line it lands on: rank 0's progress bar,
# drawn there directly (PROGRESS_TTY_VAR), stays below the scrolling lines as with tqdm.write.
CLEAR_LINE = "\r\x1b[K"
#: The longest a line without its newline is held back before it is shown as it is.
HOLD_S = 0.5


def tail_whole_lines(
    header: str,
    file: str,
    dst: TextIO,
    finished: Event,
    interval_sec: float,
    log_line_filter: Callable[[str], bool] | None = None,
) -> None:
    """``tail_logfile``'s contract (follow ``file`` into ``dst`` behind ``header`` until
    ``finished`` is set and the file is read), writing only whole lines (see the module)."""
    while not os.path.exists(file):
        if finished.is_set():
            return
        time.sleep(interval_sec)

    tag = header.rsplit(CLEAR_LINE, 1)[-1]  # the visible part, after a terminal's clear-line

    def write(line: str) -> None:
        if log_line_filter is None or log_line_filter(line):
            dst.write(f"{header}{without_tag(line, tag)}")

    pending, since = "", 0.0
    with open(file, errors="replace") as fp:
        while True:
            chunk = fp.readline()
            if chunk:
                if not pending:
                    since = time.monotonic()
                pending += chunk
                if pending.endswith("\n"):
                    write(pending)
                    pending = ""
                continue
            if pending and (finished.is_set() or time.monotonic() - since >= HOLD_S):
                write(pending if finished.is_set() else pending + "\n")
                pending = ""
            if finished.is_set():
                break
            time.sleep(interval_sec)


def without_tag(line: str, tag: str) -> str:
    """``line`` without a copy of the launcher's own ``tag`` at its start (torch's excepthook
    and log formatter write ``[rankN]: `` themselves): one tag per line."""
    if tag and line.startswith(tag):
        line = line[len(tag):]
        return line[1:] if line.startswith(" ") else line
    return line


def install() -> None:
    """Make torch elastic's ``TailLog`` (``--tee``) use :func:`tail_whole_lines` in this process."""
    tail_log.tail_logfile = tail_whole_lines
