"""Pick the launcher that started this process."""

from __future__ import annotations

import os
from collections.abc import Mapping

from paratrain.env.api import ClusterEnvironment, ProcessInfo
from paratrain.env.mpi import MPIEnvironment
from paratrain.env.single import SingleProcessEnvironment
from paratrain.env.slurm import SlurmEnvironment
from paratrain.env.torchelastic import TorchElasticEnvironment

# Order matters: torchrun inside an SLURM allocation (`srun paratrain run ...`) sets
# both torchrun's and SLURM's variables, and torchrun's describe the worker.
ENVIRONMENTS: list[ClusterEnvironment] = [
    TorchElasticEnvironment(),
    SlurmEnvironment(),
    MPIEnvironment(),
    SingleProcessEnvironment(),
]


def register_environment(environment: ClusterEnvironment) -> ClusterEnvironment:
    """Add a launcher's environment (a :class:`ClusterEnvironment`: ``detected``, ``read``, and
    optionally ``launch_defaults`` for ``paratrain run`` started by it); returns it.

    It is asked after torchrun's, whose variables describe every worker of ``paratrain run``
    wherever it runs, and before SLURM's, MPI's and the single process's; one registered with the
    same ``name`` is replaced. A worker asks in ``pt.Runtime``, a launcher when it reads its
    flags: register in the script (workers) or in a module ``sitecustomize`` imports (launcher).

    Raises:
        ConfigError: ``environment`` is not a ClusterEnvironment object.
    """
    from paratrain.errors import ConfigError

    if not isinstance(environment, ClusterEnvironment):
        raise ConfigError(f"register_environment takes a ClusterEnvironment object, got {environment!r}")
    ENVIRONMENTS[:] = [known for known in ENVIRONMENTS if known.name != environment.name]
    ENVIRONMENTS.insert(1, environment)
    return environment


def detect(environ: Mapping[str, str] | None = None) -> ProcessInfo:
    """Return this process's :class:`ProcessInfo` from the first launcher detected.

    Raises:
        ConfigError: the launcher's variables are inconsistent (names the variable).
    """
    environ = os.environ if environ is None else environ
    for environment in ENVIRONMENTS:
        if environment.detected(environ):
            info = environment.read(environ)
            _check(info)
            return info
    raise AssertionError("SingleProcessEnvironment always matches")


def detect_position(environ: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from the first launcher detected; ``(0, 1, 0)`` when
    its variables cannot be read (``detect()`` reports those when the process group is made)."""
    from paratrain.errors import ParatrainError

    environ = os.environ if environ is None else environ
    for environment in ENVIRONMENTS:
        if environment.detected(environ):
            try:
                rank, world_size, local_rank = environment.position(environ)
            except ParatrainError:
                return 0, 1, 0
            return (rank, world_size, local_rank) if 0 <= rank < world_size else (0, 1, 0)
    return 0, 1, 0


def _check(info: ProcessInfo) -> None:
    from paratrain.errors import ConfigError

    fix = ("each of the WORLD_SIZE processes needs its own RANK from 0 to WORLD_SIZE-1; let `paratrain run` "
           "(or torchrun, srun, mpirun) set them, or fix the variables you set by hand")
    if info.world_size < 1 or not 0 <= info.rank < info.world_size:
        raise ConfigError(f"rank {info.rank} is outside world size {info.world_size} ({info.source} environment); {fix}")
    if not 0 <= info.local_rank < max(info.local_world_size, 1):
        raise ConfigError(
            f"local rank {info.local_rank} is outside local world size {info.local_world_size} ({info.source} environment); "
            "LOCAL_RANK counts the processes of one node from 0 to LOCAL_WORLD_SIZE-1; let `paratrain run` set it"
        )
