"""torchrun's flags that ``paratrain run`` hands to torch's launcher as they were given.

``paratrain run`` accepts every flag of ``torchrun`` (torch.distributed.run.get_args_parser).
Most of them paratrain reads itself (sizes, rendezvous, ``-m``, logs, streams, ``--standalone``:
:mod:`paratrain.launch.config`); the ones below change nothing paratrain decides, so their
words go to ``torch.distributed.run.main`` untouched and torch gives them their meaning.
A flag not given is left out, so torch still reads its ``PET_*`` variable.

Declared here rather than copied from torch's parser at run time: the command line answers
before torch is imported. tests/launch/test_torchrun_flags.py checks this table against the
installed torch's parser (every option string, every choice), so a new torchrun flag fails
a test instead of being refused by ``paratrain run``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from paratrain.errors import ConfigError


@dataclass(frozen=True)
class TorchrunFlag:
    """One passed-through torchrun flag: its spellings, value kind and help."""

    names: tuple[str, ...]
    kind: type | None  # None: an on/off switch; else the type torch converts the value to
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None

    @property
    def dest(self) -> str:
        return self.names[-1].lstrip("-").replace("-", "_") if self.names[-1].startswith("--") else self.names[0]

    @property
    def flag(self) -> str:
        """The spelling paratrain writes in torch's argv (the dashed long one)."""
        return next(name for name in self.names if name.startswith("--"))


PASSED_THROUGH = (
    TorchrunFlag(("--monitor-interval", "--monitor_interval"), float,
                 "seconds between the agent's checks of the workers (default 0.1)", "SECONDS"),
    TorchrunFlag(("--start-method", "--start_method"), str,
                 "how the agent starts workers (default spawn)", "spawn|fork|forkserver",
                 ("spawn", "fork", "forkserver")),
    TorchrunFlag(("--event-log-handler", "--event_log_handler"), str,
                 "name of a registered torch elastic event handler (default null)", "NAME"),
    TorchrunFlag(("--role",), str, "the workers' role: ROLE_NAME, and ROLE_RANK counts within it (default default)",
                 "ROLE"),
    TorchrunFlag(("--run-path", "--run_path"), None,
                 "run the script with runpy.run_path in a spawned interpreter instead of `python script.py`"),
    TorchrunFlag(("--duplicate-stdout-filters", "--duplicate_stdout_filters"), str,
                 "copy stdout lines containing any of these comma-separated words to a file in the log "
                 "folder (,, is a literal comma)", "W[,W]"),
    TorchrunFlag(("--duplicate-stderr-filters", "--duplicate_stderr_filters"), str,
                 "the same for stderr", "W[,W]"),
    TorchrunFlag(("--logs-specs", "--logs_specs"), str,
                 "a torchrun.logs_specs entry point that lays out the log folder its own way", "NAME"),
    TorchrunFlag(("--numa-binding", "--numa_binding"), str,
                 "bind each worker to the CPUs near its GPU", "node|socket|exclusive|core-complex",
                 ("node", "socket", "exclusive", "core-complex")),
    TorchrunFlag(("--signals-to-handle", "--signals_to_handle"), str,
                 "signals the agent forwards to the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT; "
                 "SLURM jobs often add SIGUSR1,SIGUSR2)", "SIG[,SIG]"),
    TorchrunFlag(("--shutdown-timeout", "--shutdown_timeout"), int,
                 "seconds the workers get to exit after SIGTERM before SIGKILL (default "
                 "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)", "SECONDS"),
    TorchrunFlag(("--virtual-local-rank", "--virtual_local_rank"), None,
                 "LOCAL_RANK 0 in every worker, each seeing only its own GPU (CUDA_VISIBLE_DEVICES)"),
)


def add_to(group) -> None:
    """Add every passed-through flag to an argparse group (values stay strings until :func:`torch_words`)."""
    for spec in PASSED_THROUGH:
        if spec.kind is None:
            group.add_argument(*spec.names, dest=spec.dest, action="store_true", default=None, help=spec.help)
        else:
            group.add_argument(*spec.names, dest=spec.dest, metavar=spec.metavar, help=spec.help)


def torch_words(args: argparse.Namespace) -> tuple[str, ...]:
    """The given passed-through flags as torch argv words, each value checked as torch would.

    Raises:
        ConfigError: a value torch's parser would refuse (not a number, not one of the choices).
    """
    words: list[str] = []
    for spec in PASSED_THROUGH:
        value = getattr(args, spec.dest, None)
        if value is None or value is False:
            continue
        if spec.kind is None:
            words.append(spec.flag)
            continue
        if spec.choices and value not in spec.choices:
            raise ConfigError(f"{spec.flag} {value!r} is not one of {', '.join(spec.choices)}")
        if spec.kind in (int, float):
            try:
                number = spec.kind(value)
            except ValueError:
                kind = "an integer" if spec.kind is int else "a number"
                raise ConfigError(f"{spec.flag} {value!r} is not {kind} of seconds") from None
            if number < 0 or (spec.kind is float and number == 0):
                raise ConfigError(f"{spec.flag} {value} must be a positive number of seconds")
        words.append(f"{spec.flag}={value}")
    return tuple(words)
