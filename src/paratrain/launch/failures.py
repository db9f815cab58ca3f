"""What the launcher says when a job ends other than by success: one line each, naming the fix.

A worker that failed: torch elastic's ``ChildFailedError`` becomes one line that says who failed
first, how, and where to look. torch prints a framed multi-line report (``ChildFailedError.format_msg``); we name the
rank that failed first, how it ended (exit code, signal, likely OOM kill, its Python
exception from the error file), what the other ranks did, and where its log is
(:mod:`paratrain.diagnostics.failure_report` holds the facts and the ordering).

The job itself: the rendezvous that failed (where, and what to check), the node that was lost,
the exit code a legacy script's argparse gives, and a signal that stopped the launcher (SIGTERM
after the workers saved is a preemption, exit 75). :mod:`paratrain.launch.torchrun` raises these.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from paratrain.diagnostics.failure_report import build_report, peer_address, rank_outcome, recorded_exception
from paratrain.diagnostics.watchdog import STALL_EXIT_CODE
from paratrain.errors import LaunchError, ParatrainError, PreemptedError, WorkerError
from paratrain.launch.config import LaunchConfig
from paratrain.launch.legacy import parses_local_rank

PREEMPTED_EXIT_CODE = PreemptedError.exit_code
STALLED_EXIT_CODE = STALL_EXIT_CODE  # the watchdog's exit after naming a stalled rank
# Exit codes that mean paratrain's verdict, never a worker's own code (see script_failure).
VERDICT_CODES = {PREEMPTED_EXIT_CODE: "preempted", STALLED_EXIT_CODE: "stalled"}


def worker_error(exc) -> ParatrainError:
    """``pt.spawn``: a WorkerError for the first failed rank (functions write error files).

    ``exc`` is a ``torch.distributed.elastic.multiprocessing.errors.ChildFailedError``.
    """
    return _first_failure_error(exc.get_first_failure(), exc.failures)


def worker_error_from_files(log_dir: str | Path) -> ParatrainError:
    """``pt.spawn``: the same error as :func:`worker_error`, read from the error files torch
    elastic's ``record()`` wrote under ``log_dir`` (one node: local rank = rank), for when torch
    itself could not build its ``ChildFailedError``."""
    failures = {}
    for path in Path(log_dir).glob("*/attempt_*/*/error.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError):
            continue  # a file cut short as its worker was stopped says nothing
        rank = int(path.parent.name) if path.parent.name.isdigit() else 0
        timestamp = (data.get("message") or {}).get("extraInfo", {}).get("timestamp", 0) \
            if isinstance(data.get("message"), dict) else 0
        failure = SimpleNamespace(error_file_data=data, pid="?", exitcode=1, timestamp=int(timestamp or 0))
        if recorded_exception(failure) is not None:
            failures[rank] = failure
    if not failures:
        return LaunchError("a worker failed, and no worker recorded an exception; look at the output above")
    first = min(failures.items(), key=lambda item: (item[1].timestamp, item[0]))
    return _first_failure_error(first, failures)


def _first_failure_error(first: tuple[int, object], failures: dict) -> ParatrainError:
    """The error of the rank whose failure is the cause: a stall verdict's rank, else ``first``."""
    rank, failure = first
    for other_rank, other in sorted(failures.items()):
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
    local_world_size: int | None = None,
) -> LaunchError:
    """``paratrain run``: a LaunchError naming the rank that failed first; exit code = its own.

    ``log_file(local_rank)`` returns the worker's stderr log when logs are kept;
    ``hint(exitcode)`` may name a likely fix; ``lost_node(failed_ranks, peer_address)``
    explains a failure where every failed rank here only lost its peers (another node
    died); ``stacks_at_stop(rank)`` is the faulthandler dump a worker wrote when the launcher
    stopped it (:mod:`paratrain.launch.worker_site`). ``local_world_size``: this node's workers; those
    absent from the failures had exited with code 0 (named when the others then lost a peer). The error carries the whole
    :class:`~paratrain.diagnostics.failure_report.FailureReport` as ``.report``.
    """
    outcomes = []
    for rank, failure in exc.failures.items():
        log = log_file(failure.local_rank)
        outcomes.append(rank_outcome(rank, failure, str(log) if log else None, oom_kills_before, stacks_at_stop(rank)))
    report = build_report(outcomes)
    if local_world_size and exc.failures:
        rank, any_failure = next(iter(exc.failures.items()))
        node_start = rank - any_failure.local_rank  # torch numbers a node's ranks contiguously
        failed_local = {failure.local_rank for failure in exc.failures.values()}
        report.finished = [node_start + local for local in range(local_world_size) if local not in failed_local]
    if all(o.peer_lost for o in outcomes):
        explained = lost_node(sorted(o.rank for o in outcomes), peer_address(report.first.exception_message))
        report.hint = explained or report.hint
    fix = hint(report.first.exitcode)
    if fix:
        report.hint = fix
    first = report.first
    preempted = first.exitcode == PREEMPTED_EXIT_CODE and first.exception_type == PreemptedError.__name__
    stalled = first.exitcode == STALLED_EXIT_CODE and first.stall_verdict
    if preempted:
        error = LaunchError(f"rank {first.rank} {first.exception_message or 'was preempted'}")
    else:
        error = LaunchError(report.summary())
    error.report = report
    # Keep the worker's exit status for schedulers and shell scripts; signals as the shell reports them.
    code = first.exitcode
    code = code if code > 0 else 128 + abs(code) if code else 1
    if code in VERDICT_CODES and not (preempted or stalled):
        # A worker's own 75 or 124 would read as paratrain's "preempted"/"stalled" to a requeue
        # script: those codes keep that one meaning, and the worker's own code is in the message.
        error.args = (f"{error.args[0]}; paratrain exits 1, not {code}: {code} means {VERDICT_CODES[code]} only "
                      "when paratrain's own loop or watchdog says so",)
        code = 1
    error.exit_code = code
    return error


def workers_recorded(log_root: Path | None, exception_type: str) -> bool:
    """True when some worker of the newest attempt under ``log_root`` (torch's per-run log
    folder) left an error file recording ``exception_type``, e.g. ``PreemptedError``."""
    return any(recorded[0] == exception_type for recorded in recorded_errors(log_root))


def recorded_errors(log_root: Path | None) -> list[tuple[str, str]]:
    """``(exception type, message)`` from every error file of the newest attempt under ``log_root``,
    in local-rank order."""
    attempts = sorted(log_root.glob("attempt_*"), key=lambda p: int(p.name.split("_")[-1])) if log_root else []
    paths = attempts[-1].glob("*/error.json") if attempts else ()
    found = []
    for path in sorted(paths, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0):
        try:
            data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError):
            continue
        recorded = recorded_exception(SimpleNamespace(error_file_data=data))
        if recorded:
            found.append((recorded[0], recorded[1]))
    return found


def ended_without_restart(log_root: Path | None) -> LaunchError:
    """A worker asked to end the job (:mod:`paratrain.env.no_restart`): its own error, and why
    no restart was tried."""
    errors = recorded_errors(log_root)
    exc_type, message = errors[0] if errors else ("an error", "(its error file could not be read)")
    error = LaunchError(f"{exc_type}: {message}; not restarted: a restart would fail the same way")
    error.exit_code = 2 if exc_type in ("ConfigError", "DataError") else 1
    return error


def _how_it_ended(failure) -> str:
    if failure.exitcode < 0:
        return f"was killed by {failure.signal_name()}"
    return f"exited with code {failure.exitcode}"


# ---- the job: rendezvous, a lost node, a legacy script, a signal -------------------------------
def is_rendezvous_error(exc: BaseException) -> bool:
    """``exc`` comes from meeting the other nodes (the store, the rendezvous), not from the workers."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import RendezvousError

    return isinstance(exc, (dist.DistError, RendezvousError, TimeoutError, ConnectionError))


def rendezvous_error(config: LaunchConfig, where: str, exc: BaseException) -> LaunchError:
    """The rendezvous at ``where`` (host:port) failed with ``exc``: what to check, in one line."""
    cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "waiting for clients" in cause:  # node 0's store: not every node connected
        return LaunchError(
            f"the rendezvous at {where} timed out after {config.rdzv_timeout}s ({cause}); start every node "
            f"(--node-rank 0 to {config.max_nodes - 1}) with the same --master-addr/--master-port and "
            f"--nnodes {config.max_nodes}, "
            "or raise --rdzv-timeout"
        )
    return LaunchError(
        f"the rendezvous at {where} failed ({type(exc).__name__}: {cause}); check that node 0 runs, with the same "
        f"--nnodes {config.min_nodes if config.min_nodes == config.max_nodes else f'{config.min_nodes}:{config.max_nodes}'}, and that "
        f"every node reaches {where} (paratrain doctor), or raise --rdzv-timeout"
    )


def exit_hint(config: LaunchConfig, exitcode: int) -> str:
    """What a worker's exit code says about the launch itself, or ``""``."""
    # 2 is argparse's exit code: a legacy script that did not get its --local_rank.
    if exitcode == 2 and not config.legacy_local_rank and parses_local_rank(config.target, config.module):
        return "the script parses --local_rank itself: add --legacy-local-rank"
    return ""


def lost_node(config: LaunchConfig, failed: list[int], peer: str | None) -> str:
    """Every failed rank of this node lost its peers: on several nodes, another node is gone."""
    if not config.multi_node:
        return ""
    # The other node's ranks are not named: it may run another number of processes than this one.
    if config.rdzv_backend == "static" and config.max_nodes == 2:
        lost = f"node {1 - config.node_rank}"
    else:
        lost = "another node"
    return (
        f"every rank of this node ({_span(failed)}) lost its peers at once: {lost}"
        + (f" at {peer}" if peer else "")
        + " died or became unreachable; check that host, then start every node again "
        "(or launch with --nnodes MIN:MAX --max-restarts K to let the remaining nodes go on without it)"
    )


def _span(ranks: list[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)) \
        else ", ".join(map(str, ranks))


def stopped_by(sigval, preempted: bool = False) -> LaunchError:
    """The launcher got a signal; the agent has passed it to the workers and waited for them.

    SIGTERM is how SLURM and Kubernetes preempt: pt.fit, ``paratrain train`` and loops using
    ``rt.preemption()`` finish their step, save, and record a PreemptedError before they exit
    (``preempted``); then the launcher says "preempted" and exits 75. Workers that recorded
    nothing (plain scripts) were stopped where they were: 128+15, as a shell reports SIGTERM.
    """
    if sigval == signal.SIGTERM and preempted:
        stopped = LaunchError(
            "preempted by SIGTERM: the workers finished their step and saved; run the same command again to resume"
        )
        stopped.exit_code = PreemptedError.exit_code
        return stopped
    if sigval == signal.SIGINT:  # Ctrl-C: pt.fit and paratrain train save as on SIGTERM; exit 130 as a shell reports it
        what = "the workers finished their step and saved; run the same command again to resume" if preempted \
            else "the workers were stopped too"
        stopped = LaunchError(f"interrupted by SIGINT (Ctrl-C): {what}")
        stopped.exit_code = 130
        return stopped
    stopped = LaunchError(f"stopped by {sigval.name}; the workers were stopped too")
    stopped.exit_code = 128 + int(sigval)
    return stopped
