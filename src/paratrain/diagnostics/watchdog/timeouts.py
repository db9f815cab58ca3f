"""How long the hang watchdog waits: the default stall timeout, a Runtime's, the process-group timeout
that leaves the watchdog room to act first, and how often the watchdog publishes.

Pure decisions from numbers and environment variables; nothing here starts a thread or talks
to the store (:mod:`paratrain.diagnostics.watchdog.thread` does).
"""

from __future__ import annotations

import math
import os
from typing import Any

from paratrain.env import variables
from paratrain.errors import ConfigError

DEFAULT_STALL_TIMEOUT_S = variables.seconds_or_default("PARATRAIN_STALL_TIMEOUT", 300.0)  # NCCL's: 600–1800 s
STACK_WAIT_S = 5.0  # how long the reporters wait for the stalled rank's frames


def poll_interval(stall_timeout_s: float) -> float:
    """Seconds between a watchdog's publications: a tenth of the stall timeout, within 0.5–10 s."""
    return min(10.0, max(0.5, stall_timeout_s / 10))


def runtime_stall_timeout(stall_timeout: Any, group_timeout_s: float, environ=os.environ) -> float:
    """The stall timeout of a Runtime's own watchdog in seconds; 0: none.

    ``stall_timeout`` as given to ``pt.Runtime`` wins; else, in a worker of ``paratrain run``
    or ``pt.spawn``, ``PARATRAIN_STALL_TIMEOUT`` (``--stall-timeout``) or the process group's
    timeout; else (plain torchrun, SLURM, MPI) none unless asked for.

    Raises:
        ConfigError: a value that is not 0 or a positive number of seconds.
    """
    from paratrain.env.torchelastic import LAUNCHER_PID_VAR, SPAWNED_VAR

    if stall_timeout is not None:
        return _seconds_or_off("pt.Runtime(stall_timeout=...)", stall_timeout)
    if not (environ.get(LAUNCHER_PID_VAR) or environ.get(SPAWNED_VAR)):
        return 0.0
    text = environ.get("PARATRAIN_STALL_TIMEOUT", "").strip()
    if text:
        try:
            seconds = float(text)
        except ValueError:
            raise ConfigError(f"PARATRAIN_STALL_TIMEOUT={text!r} is not a number of seconds; "
                              "give seconds (0: no watchdog)") from None
        return _seconds_or_off("PARATRAIN_STALL_TIMEOUT", seconds)
    return float(group_timeout_s)


def group_timeout_with_watchdog(group_timeout_s: float, stall_timeout_s: float) -> float:
    """The process group's timeout when a Runtime's watchdog (``stall_timeout_s`` > 0) runs.

    gloo's own timeout would end a *waiting* rank with "Timed out waiting", and the launcher
    would blame it. Given a margin (one publication, the wait for the stalled rank's frames,
    a few seconds to end), the watchdog always ends the job first, naming the rank that is
    not in the collective; nothing ends earlier than the collective timeout asked for.
    """
    if not stall_timeout_s:
        return group_timeout_s
    return max(group_timeout_s, stall_timeout_s + poll_interval(stall_timeout_s) + STACK_WAIT_S + 5.0)


def _seconds_or_off(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ConfigError(f"{what} must be 0 (no watchdog) or a positive number of seconds, got {value!r}")
    return float(value)
