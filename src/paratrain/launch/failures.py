"""Turn torch elastic's ``ChildFailedError`` into one line that says who failed first, how, and where to look.

torch prints a framed multi-line report (``ChildFailedError.format_msg``); we name the
rank that failed first, how it ended (exit code, signal, likely OOM kill, its Python
exception from the error file), what the other ranks did, and where its log is
(:mod:`paratrain.diagnostics.failure_report` holds the facts and the ordering).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from paratrain.diagnostics.failure_report import build_report, peer_address, rank_outcome, recorded_exception
from paratrain.errors import LaunchError, ParatrainError, PreemptedError, WorkerError

PREEMPTED_EXIT_CODE = PreemptedError.exit_code


def worker_error(exc) -> ParatrainError:
    """``pt.spawn``: a WorkerError for the first failed rank (functions write error files).

    ``exc`` is a ``torch.distributed.elastic.multiprocessing.errors.ChildFailedError``.
    """
    rank, failure = exc.get_first_failure()
    for other_rank, other in sorted(exc.failures.items()):
        # The watchdog's verdict names the stalled rank; a peer that lost it after its exit only
        # saw a closed connection, perhaps a moment earlier (as build_report orders them).
        found = recorded_exception(other)
        if found is not None and found[1].startswith("stall:"):
            rank, failure = other_rank, other
            break
    recorded = recorded_exception(failure)
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
    oom_kills_before: int | None = None,
    lost_node: Callable[[list[int], str | None], str] = lambda ranks, peer: "",
    stacks_at_stop: Callable[[int], str | None] = lambda rank: None,
) -> LaunchError:
    """``paratrain run``: a LaunchError naming the rank that failed first; exit code = its own.

    ``log_file(local_rank)`` returns the worker's stderr log when logs are kept;
    ``hint(exitcode)`` may name a likely fix; ``lost_node(failed_ranks, peer_address)``
    explains a failure where every failed rank here only lost its peers (another node
    died); ``stacks_at_stop(rank)`` is the faulthandler dump a worker wrote when the launcher
    stopped it (:mod:`paratrain.launch.worker_site`). The error carries the whole
    :class:`~paratrain.diagnostics.failure_report.FailureReport` as ``.report``.
    """
    outcomes = []
    for rank, failure in exc.failures.items():
        log = log_file(failure.local_rank)
        outcomes.append(rank_outcome(rank, failure, str(log) if log else None, oom_kills_before, stacks_at_stop(rank)))
    report = build_report(outcomes)
    if all(o.peer_lost for o in outcomes):
        explained = lost_node(sorted(o.rank for o in outcomes), peer_address(report.first.exception_message))
        report.hint = explained or report.hint
    fix = hint(report.first.exitcode)
    if fix:
        report.hint = fix
    first = report.first
    if first.exitcode == PREEMPTED_EXIT_CODE:
        error = LaunchError(f"rank {first.rank} {first.exception_message or 'was preempted'}")
    else:
        error = LaunchError(report.summary())
    error.report = report
    # Keep the worker's exit status for schedulers and shell scripts; signals as the shell reports them.
    code = first.exitcode
    error.exit_code = code if code > 0 else 128 + abs(code) if code else 1
    return error


def _how_it_ended(failure) -> str:
    if failure.exitcode < 0:
        return f"was killed by {failure.signal_name()}"
    return f"exited with code {failure.exitcode}"
