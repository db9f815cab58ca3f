"""Processes started by ``mpirun`` (OpenMPI) or a PMI launcher (MPICH, Intel MPI)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from paratrain.env.api import ClusterEnvironment, ProcessInfo, env_int
from paratrain.errors import ConfigError

# Every rank of one job derives the same port from the job's id (as under SLURM), so
# two jobs on one machine get different ports and nobody picks one by hand.
_BASE_PORT = 20000
_PORT_RANGE = 10000

# (rank, size, local rank, local size) variable names per MPI family.
_FAMILIES = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"),
)
# Variables that name the job, the same on every rank: OpenMPI's job id, PMIx's namespace, Hydra's.
_JOB_ID_VARS = ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME", "PMI_JOBID")


class MPIEnvironment(ClusterEnvironment):
    name = "mpi"

    def _family(self, environ: Mapping[str, str]):
        for family in _FAMILIES:
            if family[0] in environ and family[1] in environ:
                return family
        return None

    def detected(self, environ: Mapping[str, str]) -> bool:
        return self._family(environ) is not None

    def position(self, environ: Mapping[str, str]) -> tuple[int, int, int]:
        rank_var, size_var, local_var, _ = self._family(environ)
        return env_int(environ, rank_var), env_int(environ, size_var), env_int(environ, local_var, 0)

    def read(self, environ: Mapping[str, str]) -> ProcessInfo:
        """Rank and sizes from MPI; master address and port from MASTER_ADDR/PORT.

        On one node (every rank local) the master is 127.0.0.1 and the port is derived
        from the MPI job id, so ``mpirun -np 2 python train.py`` needs nothing else.

        Raises:
            ConfigError: several nodes and no MASTER_ADDR (MPI does not say where rank 0
                runs; guessing would hang), or a malformed variable.
        """
        rank_var, size_var, local_var, local_size_var = self._family(environ)
        world_size = env_int(environ, size_var)
        local_world_size = env_int(environ, local_size_var, 1)
        one_node = local_world_size >= world_size
        master_addr = environ.get("MASTER_ADDR") or ("127.0.0.1" if one_node else None)
        if world_size > 1 and not master_addr:
            raise ConfigError(
                f"started by MPI on {world_size // max(local_world_size, 1)} nodes without MASTER_ADDR; "
                "pass the address of rank 0's node: mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port> ..."
            )
        rank = env_int(environ, rank_var)
        return ProcessInfo(
            rank=rank,
            local_rank=env_int(environ, local_var, 0),
            world_size=world_size,
            local_world_size=local_world_size,
            # Provisional (MPI names no node): right when every node runs as many ranks; the
            # Runtime replaces both with what the ranks' host names say (runtime/topology.py).
            node_rank=rank // max(local_world_size, 1),
            num_nodes=max(1, world_size // max(local_world_size, 1)),
            master_addr=master_addr or "127.0.0.1",
            master_port=env_int(environ, "MASTER_PORT", 0) or _job_port(environ),
            source=self.name,
        )


def _job_port(environ: Mapping[str, str]) -> int:
    """A port every rank of the job agrees on: derived from the MPI job id."""
    job = next((environ[var] for var in _JOB_ID_VARS if environ.get(var)), "")
    return _BASE_PORT + zlib.crc32(job.encode()) % _PORT_RANGE
