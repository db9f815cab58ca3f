"""paratrain's own environment variables, read through one checked parse each.

A ``PARATRAIN_*`` value that does not parse is a one-line :class:`ConfigError` naming the
variable, the value and what it takes (:func:`check`, run by every ``paratrain`` command and by
``pt.Runtime``), never a traceback. Module-level defaults (``comm.DEFAULT_TIMEOUT_S``, the
watchdog's) are read at import, before any error can be reported in one line: they use
:func:`seconds_or_default`, which keeps the default for a malformed value, and :func:`check`
refuses that value before anything runs with it.

Some variables are set by a launcher for the processes it starts: torchrun's ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` … and paratrain's own ``PARATRAIN_LAUNCHER_PID``,
``PARATRAIN_RUN_LOCK`` …. A ``paratrain train`` or ``paratrain run`` command typed in a shell is
a launcher, never such a process: values it finds there were left in the shell (an ``export``
from an earlier experiment) and would make a one-process run wait for ranks that never come,
kill itself for a launcher long gone, or write into another run's locked directory.
:func:`stale_launcher_variables` names them; the commands drop them and say so in one line.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping

from paratrain.errors import ConfigError

#: What torchrun (and other hand-written launchers) export to each worker.
TORCHRUN_WORKER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                             "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                             "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")
#: What paratrain's launchers export to their workers only (env/torchelastic.py, launch/spawn.py,
#: launch/worker_site, checkpoint/writer_lock.py).
PARATRAIN_WORKER_VARIABLES = ("PARATRAIN_LAUNCHER_PID", "PARATRAIN_SPAWNED", "PARATRAIN_SPAWN_PARENT",
                              "PARATRAIN_RUN_LOCK", "PARATRAIN_STACKS_DIR", "PARATRAIN_PROGRESS_TTY",
                              "PARATRAIN_WARM_POOL")  # launch/worker_site/warm_client.POOL_VAR


def _seconds(positive: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)  # ValueError: not a number
        if math.isnan(value) or value < 0 or (positive and value == 0) or math.isinf(value):
            raise ValueError(text)
        return value

    return parse


def _pid(text: str) -> int:
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text

    return parse


def _cpu_shares(text: str):
    from paratrain.env.cpu_binding import decode

    return decode(text)


#: name → (parse, what a valid value is). Variables not listed take any text (a path, a flag).
PARSERS: dict[str, tuple[Callable[[str], object], str]] = {
    "PARATRAIN_TIMEOUT": (_seconds(positive=True), "a positive, finite number of seconds, e.g. 600"),
    "PARATRAIN_STALL_TIMEOUT": (_seconds(positive=False), "a finite number of seconds, e.g. 300 (0: no watchdog)"),
    "PARATRAIN_WAIT_REPORT_S": (_seconds(positive=True), "a positive, finite number of seconds, e.g. 15"),
    "PARATRAIN_BACKEND": (_choice("auto", "gloo", "nccl"), "one of auto, gloo, nccl"),
    "PARATRAIN_CPU_CORES": (_cpu_shares, "a ';'-separated list of CPU shares like '0,1;2-3'"),
    "PARATRAIN_LAUNCHER_PID": (_pid, "a process id (set by paratrain run for its workers)"),
    "PARATRAIN_SPAWN_PARENT": (_pid, "a process id (set by pt.spawn for its workers)"),
    "PARATRAIN_OPTIMIZER_HINT": (_choice("0", "1"), "0 (silence the hint) or 1"),
}


def read(name: str, environ: Mapping[str, str] | None = None):
    """The parsed value of ``name`` (see :data:`PARSERS`), or None when it is unset or empty.

    Raises:
        ConfigError: the value does not parse (one line: the variable, its value, what it takes).
    """
    environ = os.environ if environ is None else environ
    text = environ.get(name, "").strip()
    if not text:
        return None
    parse, wanted = PARSERS.get(name, (str, "text"))
    try:
        return parse(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not {wanted}: fix it, or unset it (`unset {name}`)") from None


def seconds_or_default(name: str, default: float) -> float:
    """``name`` as seconds for a module-level default; ``default`` when unset or malformed
    (:func:`check` refuses a malformed one before anything runs with it)."""
    try:
        value = read(name)
    except ConfigError:
        return default
    return default if value is None else float(value)


def check(environ: Mapping[str, str] | None = None, skip: tuple[str, ...] = ()) -> None:
    """Parse every ``PARATRAIN_*`` variable paratrain reads (but those in ``skip``).

    Raises:
        ConfigError: the first one that does not parse, in one line.
    """
    for name in PARSERS:
        if name not in skip:
            read(name, environ)


def stale_launcher_variables(environ: Mapping[str, str] | None = None,
                             names: tuple[str, ...] = TORCHRUN_WORKER_VARIABLES + PARATRAIN_WORKER_VARIABLES) -> list[str]:
    """Those of ``names`` (launcher variables) set in ``environ``: in a command typed in a shell, no
    launcher set them for this run."""
    environ = os.environ if environ is None else environ
    return [name for name in names if name in environ]


def stale_variables_line(command: str, names: list[str], environ: Mapping[str, str] | None = None) -> str:
    """The one line a command prints when it ignores ``names``."""
    environ = os.environ if environ is None else environ
    shown = " ".join(f"{name}={environ.get(name, '')}" for name in names[:6]) + (" …" if len(names) > 6 else "")
    return (f"paratrain {command}: ignoring {shown} from the environment: no launcher set them for this run "
            f"(paratrain {command} is the launcher: --nproc-per-node, --nnodes, --master-addr say what they would); "
            f"unset them to silence this line")


@contextlib.contextmanager
def ignoring_stale_launcher_variables(
        command: str, names: tuple[str, ...] = TORCHRUN_WORKER_VARIABLES + PARATRAIN_WORKER_VARIABLES) -> Iterator[None]:
    """For the block, ``os.environ`` without :func:`stale_launcher_variables` of ``names`` (said in one
    line on stderr when there are any); restored after, for an in-process caller."""
    names = stale_launcher_variables(names=names)
    if names:
        print(stale_variables_line(command, names), file=sys.stderr, flush=True)
    saved = {name: os.environ.pop(name) for name in names}
    try:
        yield
    finally:
        os.environ.update(saved)
