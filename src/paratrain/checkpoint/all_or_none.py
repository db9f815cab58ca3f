"""Every rank ends a checkpoint step the same way: all succeed, or all raise.

When one rank fails while writing (disk full, a state that cannot be saved) and the
others go on to the next collective, they wait for it until the process-group
timeout and the job dies with a timeout naming nobody. Instead each step runs
locally, then every rank's outcome is all-gathered, and a failure anywhere becomes
the same :class:`CheckpointError`, naming the rank, on every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from paratrain import comm
from paratrain.checkpoint.files import describe_os_error
from paratrain.errors import CheckpointError, ParatrainError

T = TypeVar("T")


def _one_line(exc: BaseException, doing: str) -> str:
    if isinstance(exc, ParatrainError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, OSError):
        return describe_os_error(exc, doing)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{doing}: {type(exc).__name__}: {text}"


def on_all_ranks(doing: str, step: Callable[[], T], group: Any = None) -> T:
    """Run ``step`` here; raise on every rank if it failed on any. Collective (on ``group``, a group
    of every rank, when given: a writing thread's own; else the control group).

    Raises:
        CheckpointError: ``step`` raised on some rank; the message names the first
            failing rank (when there are several processes) and its error.
    """
    result, outcome, local = run_here(doing, step)
    agree(outcome, None, group, local)
    return result


Outcome = tuple[str, bool] | None  # None: it succeeded; else one line naming the failure, and whether a restart can help


def run_here(doing: str, step: Callable[[], T]) -> tuple[T | None, Outcome, BaseException | None]:
    """Run ``step`` on this rank alone: its result (None when it failed), the outcome to hand to
    :func:`agree` (now or later, e.g. from a writing thread), and the exception it raised. Not collective."""
    try:
        return step(), None, None
    except Exception as exc:  # any failure must reach the other ranks, or they hang
        return None, (_one_line(exc, doing), getattr(exc, "restart_can_help", True)), exc


def agree(outcome: Outcome, share: Any, group: Any = None, local: BaseException | None = None) -> list[Any]:
    """Every rank's ``share`` in rank order, once every rank's ``outcome`` (from :func:`run_here`) is known to
    every rank: one all-gather. Collective (on ``group`` when given, as :func:`on_all_ranks`).

    Raises:
        CheckpointError: some rank's outcome is a failure; on every rank, naming the first failing rank
            (and the others that failed). ``local``: this rank's own exception, kept as the cause.
    """
    gathered = comm.all_gather_object((outcome, share), group=group)
    outcomes = [outcome for outcome, _ in gathered]
    failed = [(rank, outcome[0]) for rank, outcome in enumerate(outcomes) if outcome is not None]
    if not failed:
        return [shared for _, shared in gathered]
    rank, message = failed[0]
    if len(outcomes) == 1:
        if isinstance(local, ParatrainError):
            raise local
        raise CheckpointError(message) from local
    others = f" (also failed on rank(s) {', '.join(str(r) for r, _ in failed[1:])})" if len(failed) > 1 else ""
    error = CheckpointError(f"rank {rank}: {message}{others}")
    # A node that cannot see the storage fails so again after a restart: every rank says so.
    error.restart_can_help = all(outcome[1] for outcome in outcomes if outcome is not None)
    raise error from local


def main_then_share(doing: str, step: Callable[[], T], group: Any = None) -> T:
    """Run ``step`` on rank 0 only; every rank gets its result or the same error. Collective (on
    ``group`` when given, as :func:`on_all_ranks`)."""
    result = on_all_ranks(doing, step if comm.is_main() else (lambda: None), group)
    return comm.broadcast_object(result, group=group)
