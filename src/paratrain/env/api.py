"""The cluster-environment interface and the answer it gives."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProcessInfo:
    """Where this process sits in the job. ``master_addr``/``master_port`` may be
    ``None`` when the launcher already set up a store (torchrun) or for one process."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str | None
    master_port: int | None
    source: str  # which launcher started us: "torchrun", "slurm", "mpi", "single"
    #: the nodes run different numbers of processes (known once the ranks agreed on the job's topology)
    uneven_nodes: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


class ClusterEnvironment(abc.ABC):
    """Reads one launcher's environment variables. Stateless: pass the environment in."""

    name: str

    @abc.abstractmethod
    def detected(self, environ: Mapping[str, str]) -> bool:
        """True when ``environ`` was set by this launcher."""

    @abc.abstractmethod
    def read(self, environ: Mapping[str, str]) -> ProcessInfo:
        """The process's place in the job.

        Raises:
            ConfigError: a variable is missing or malformed (names the variable).
        """

    def position(self, environ: Mapping[str, str]) -> tuple[int, int, int]:
        """``(rank, world_size, local_rank)`` alone — what rank-aware printing and logging
        need, without the rendezvous address that :meth:`read` may require.

        Raises:
            ConfigError: a variable is missing or malformed (names the variable).
        """
        info = self.read(environ)
        return info.rank, info.world_size, info.local_rank

    def launch_defaults(self, environ: Mapping[str, str]) -> dict[str, Any] | None:
        """What ``paratrain run`` started in this environment (``srun paratrain run``, one launcher
        per node) takes for the node flags it was not given: a dict with ``nnodes``, ``node_rank``,
        ``master_addr`` and ``master_port``; None (the default) when this environment says nothing.

        Raises:
            ConfigError: the environment describes a job a launcher per node cannot run (names the fix).
        """
        return None


def env_int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    """``int(environ[name])`` with an error that names the variable."""
    from paratrain.errors import ConfigError

    raw = environ.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ConfigError(f"environment variable {name} is not set; start the job with 'paratrain run'")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer") from None
