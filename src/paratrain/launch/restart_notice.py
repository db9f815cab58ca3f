"""One line when torch's agent restarts the workers: who ended, how, and which attempt starts.

torch elastic restarts a failed worker group in silence at the log level ``paratrain run``
keeps it at (its own ``failed (exitcode: -9)`` record is an INFO/ERROR log line among many),
so a user sees a gloo traceback and the script starting over. :class:`RestartNotice` wraps
the agent's two steps for as long as the launch runs: ``_monitor_workers`` (the failures it
saw are kept) and ``_restart_workers`` (where the line is printed, before the new attempt
starts). The agent's behaviour is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from paratrain.diagnostics.failure_report import build_report, rank_outcome


def restart_line(failures: dict, remaining: int, max_restarts: int, log_file: Callable[[int], Path | None]) -> str:
    """The line for a restart after ``failures`` (torch's ``RunResult.failures``: global rank →
    ``ProcessFailure``); ``remaining`` restarts are left after this one."""
    if not failures:  # the group is healthy here: another node left or joined
        return ("another node joined or restarted: restarting this node's workers to meet it "
                "(a change of members does not use up --max-restarts)")
    attempt = max_restarts - remaining + 1  # 1-based number of the attempt that starts now
    starting = f"restarting the group: attempt {attempt} of {max_restarts + 1}"
    outcomes = []
    for rank, failure in failures.items():
        log = log_file(failure.local_rank)
        outcomes.append(rank_outcome(rank, failure, str(log) if log else None, None))
    report = build_report(outcomes)
    first = report.first
    after = [f"rank {c.rank} {'lost its peer' if c.peer_lost else c.how(brief=True)}" for c in report.consequences]
    if report.stopped:
        after.append(f"rank{'s' * (len(report.stopped) > 1)} {', '.join(map(str, report.stopped))} stopped by the launcher")
    return (f"rank {first.rank} (local rank {first.local_rank}, host {first.host}, pid {first.pid}) {first.how(brief=True)}"
            + (f" ({'; '.join(after)})" if after else "") + f"; {starting}")


class RestartNotice:
    """Prints :func:`restart_line` through ``say`` each time torch's local agent restarts its
    workers, while the ``with`` block runs (torch's ``LocalElasticAgent``, in this process)."""

    def __init__(self, say: Callable[[str], None], log_file: Callable[[int], Path | None]):
        self._say, self._log_file = say, log_file
        self._saved: dict[str, object] = {}

    def __enter__(self) -> RestartNotice:
        from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

        agent_class = LocalElasticAgent
        monitor, restart = agent_class._monitor_workers, agent_class._restart_workers
        say, log_file = self._say, self._log_file

        def _monitor_workers(agent, worker_group):
            result = monitor(agent, worker_group)
            agent._paratrain_last_failures = dict(getattr(result, "failures", None) or {})
            return result

        def _restart_workers(agent, worker_group):
            try:
                spec = worker_group.spec
                say(restart_line(getattr(agent, "_paratrain_last_failures", {}), agent._remaining_restarts,
                                 spec.max_restarts, log_file))
            except Exception:  # the line is a courtesy: the restart goes ahead whatever happens here
                pass
            agent._paratrain_last_failures = {}
            return restart(agent, worker_group)

        self._class = agent_class
        self._saved = {name: agent_class.__dict__.get(name) for name in ("_monitor_workers", "_restart_workers")}
        agent_class._monitor_workers = _monitor_workers
        agent_class._restart_workers = _restart_workers
        return self

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            if original is None:
                delattr(self._class, name)  # it was inherited
            else:
                setattr(self._class, name, original)
