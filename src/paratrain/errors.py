"""paratrain's errors: one base class, a few kinds, messages that name the fix.

Every error paratrain raises on purpose derives from :class:`ParatrainError`, so a
caller can catch them all, and the CLI can print them as one line and exit non-zero
instead of a traceback wall.
"""

from __future__ import annotations


class ParatrainError(Exception):
    """Base class. The message says what is wrong and how to fix it, in one line."""

    exit_code = 2
    #: False for an error that running the same thing again repeats (a configuration error,
    #: storage a node cannot see): an elastic launcher ends the job instead of restarting it.
    restart_can_help = True


class ConfigError(ParatrainError, ValueError):
    """An option, flag or argument is invalid (bad value, bad combination)."""

    restart_can_help = False


class LaunchError(ParatrainError):
    """Processes could not be started, could not find each other, or failed."""

    exit_code = 1


class DistributedError(ParatrainError, RuntimeError):
    """A collective failed or the ranks disagree (desync, different weights, lengths)."""

    exit_code = 1


class CollectiveTimeoutError(DistributedError, TimeoutError):
    """A collective or barrier waited longer than its timeout; names the late ranks."""

    def __init__(self, message: str, late_ranks: list[int] | None = None):
        super().__init__(message)
        self.late_ranks = list(late_ranks or [])


class PreemptedError(ParatrainError):
    """The run was asked to stop (SIGTERM): it finished its step, saved, and stops; rerun to resume."""

    exit_code = 75  # sysexits.h EX_TEMPFAIL; paratrain.diagnostics.preemption.PREEMPTED_EXIT_CODE


class WorkerError(ParatrainError, RuntimeError):
    """A worker process raised; carries its rank, exception type and traceback."""

    exit_code = 1

    def __init__(self, rank: int, exc_type: str, message: str, remote_traceback: str = ""):
        self.rank = rank
        self.exc_type = exc_type
        self.remote_message = message
        self.remote_traceback = remote_traceback
        super().__init__(f"rank {rank} raised {exc_type}: {message}")

    def __str__(self) -> str:
        head = super().__str__()
        if self.remote_traceback:
            return f"{head}\n\nTraceback from rank {self.rank}:\n{self.remote_traceback.rstrip()}"
        return head


class DataError(ParatrainError, ValueError):
    """A dataset, sampler or loader cannot be used as asked."""

    restart_can_help = False


class NonFiniteError(ParatrainError, RuntimeError):
    """Training produced a NaN/inf loss, gradient norm or weights; names the step and the last good checkpoint."""

    exit_code = 1


class RunDirectoryBusyError(ParatrainError):
    """Another live paratrain run writes into the same directory; names it (pid, host, command)."""

    exit_code = 1


class CheckpointError(ParatrainError):
    """A checkpoint cannot be written, found, verified or loaded."""

    exit_code = 1


class SharedStorageError(CheckpointError):
    """A node cannot see the checkpoints another node wrote: restarting cannot change that."""

    restart_can_help = False


class MissingDependencyError(ParatrainError, ImportError):
    """A package is needed; the message names the extra to install (or, ``install``, what to install)."""

    def __init__(self, package: str, extra: str, purpose: str, install: str | None = None):
        super().__init__(
            f"{purpose} needs the '{package}' package: pip install {install or repr(f'paratrain[{extra}]')}"
        )
        self.package = package
        self.extra = extra


def require(module: str, extra: str, purpose: str, package: str | None = None):
    """Import an optional module or raise :class:`MissingDependencyError` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(package or module.split(".")[0], extra, purpose) from exc
