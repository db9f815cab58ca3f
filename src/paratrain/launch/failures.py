"""Turn torch elastic's ``ChildFailedError`` into one line that says who failed and where to look.

torch prints a framed multi-line report (``ChildFailedError.format_msg``); the worker's
own traceback is already on the console (or in its log file) by then, so we name the
first failed rank, its exit code or signal, and the log file instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from paratrain.errors import LaunchError, ParatrainError, WorkerError


def worker_error(exc) -> ParatrainError:
    """``pt.spawn``: a WorkerError for the first failed rank (functions write error files).

    ``exc`` is a ``torch.distributed.elastic.multiprocessing.errors.ChildFailedError``.
    """
    rank, failure = exc.get_first_failure()
    recorded = _recorded_exception(failure)
    if recorded is not None:
        exc_type, detail, traceback = recorded
        return WorkerError(rank, exc_type, detail, traceback)
    return LaunchError(
        f"rank {rank} (pid {failure.pid}) {_how_it_ended(failure)} without a Python exception; look at its output above"
    )


def script_failure(
    exc,
    log_file: Callable[[int], Path | None] = lambda local_rank: None,
    hint: Callable[[int], str] = lambda exitcode: "",
) -> LaunchError:
    """``paratrain run``: a LaunchError naming the first failed rank; exit code = the worker's.

    ``log_file(local_rank)`` returns the worker's stderr log when ``--log-dir`` was given;
    ``hint(exitcode)`` may name a likely fix (appended after the log location).
    """
    rank, failure = exc.get_first_failure()
    others = sorted(r for r in exc.failures if r != rank)
    recorded = _recorded_exception(failure)
    what = f" after {recorded[0]}: {(recorded[1].splitlines() or [''])[0]}" if recorded else ""
    log = log_file(failure.local_rank)
    where = f"its output is in {log}" if log else "its traceback is above"
    also = f" (rank{'s' * (len(others) > 1)} {', '.join(map(str, others))} failed too)" if others else ""
    fix = hint(failure.exitcode)
    who = f"rank {rank} (local rank {failure.local_rank}, pid {failure.pid})"
    error = LaunchError(f"{who} {_how_it_ended(failure)}{what}{also}; {where}" + (f"; {fix}" if fix else ""))
    # Keep the worker's exit status for schedulers and shell scripts; signals as the shell reports them.
    error.exit_code = (
        failure.exitcode if failure.exitcode > 0 else 128 + abs(failure.exitcode) if failure.exitcode else 1
    )
    return error


def _how_it_ended(failure) -> str:
    if failure.exitcode < 0:
        return f"was killed by {failure.signal_name()}"
    return f"exited with code {failure.exitcode}"


def _recorded_exception(failure) -> tuple[str, str, str] | None:
    """(type, message, traceback) from the worker's error file, when it wrote one (``@record``)."""
    data = failure.error_file_data or {}
    message = data.get("message")
    if isinstance(message, str):  # some torch versions store the JSON as a string
        try:
            message = json.loads(message)
        except ValueError:
            return None  # torch's "<NONE>": the worker wrote no error file
    if not isinstance(message, dict) or not message.get("message"):
        return None
    text = str(message["message"])
    traceback = str(message.get("extraInfo", {}).get("py_callstack", ""))
    exc_type, _, detail = text.partition(": ")
    return exc_type.strip(), detail.strip(), traceback
