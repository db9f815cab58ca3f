"""A worker's error that a restart would repeat ends the job at once.

torch elastic restarts the workers after any failure until ``--max-restarts`` is spent. For a
configuration error, or checkpoints a node cannot see, every restart fails the same way: the
job burns its restarts and ends with the same error minutes later. A worker about to end with
such an error (``restart_can_help = False`` on paratrain's error classes) records it in torch
elastic's error file, then sends :data:`END_SIGNAL` to its launcher (``paratrain run``, whose
pid is in ``PARATRAIN_LAUNCHER_PID``); the launcher stops the workers without restarting them
and ends with that error.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

from paratrain.env.api import env_int
from paratrain.env.torchelastic import LAUNCHER_PID_VAR, record_for_launcher
from paratrain.replica_environ import in_replica_group

#: Sent by a worker to its launcher: "my error repeats on restart; end the job".
END_SIGNAL = signal.SIGUSR1


def restarts_left(environ: Mapping[str, str]) -> bool:
    """True when torch elastic would restart this worker's group after a failure, or when the worker is in a
    replica group (``paratrain run --fault-tolerance replicas`` starts a failed group again)."""
    if in_replica_group(environ):
        return True
    return env_int(environ, "TORCHELASTIC_RESTART_COUNT", 0) < env_int(environ, "TORCHELASTIC_MAX_RESTARTS", 0)


def end_job_instead_of_restart(exc: BaseException, environ: Mapping[str, str] | None = None) -> bool:
    """In a worker ending with ``exc``: when a restart cannot help and restarts are left, record
    ``exc`` for the launcher and ask it to end the job. Returns True when it asked. Not collective
    (every rank that fails so asks; the first request ends the job)."""
    environ = os.environ if environ is None else environ
    if getattr(exc, "restart_can_help", True) or not restarts_left(environ) or not environ.get(LAUNCHER_PID_VAR):
        return False
    record_for_launcher(exc)  # before the signal: the launcher reads it once the workers stopped
    try:
        os.kill(int(environ[LAUNCHER_PID_VAR]), END_SIGNAL)
    except (OSError, ValueError):
        return False
    return True
