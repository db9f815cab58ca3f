"""Processes started by ``mpirun`` (OpenMPI) or a PMI launcher (MPICH, Intel MPI)."""

from __future__ import annotations

from collections.abc import Mapping

from paratrain.env.api import ClusterEnvironment, ProcessInfo, env_int
from paratrain.errors import ConfigError

_DEFAULT_PORT = 29500

# (rank, size, local rank, local size) variable names per MPI family.
_FAMILIES = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"),
)


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
        rank_var, size_var, local_var, local_size_var = self._family(environ)
        world_size = env_int(environ, size_var)
        local_world_size = env_int(environ, local_size_var, 1)
        master_addr = environ.get("MASTER_ADDR")
        if world_size > 1 and not master_addr:
            # MPI does not tell us where rank 0 lives; guessing would hang.
            raise ConfigError(
                "started by MPI without MASTER_ADDR; pass -x MASTER_ADDR=<rank 0 host> (and MASTER_PORT) to mpirun"
            )
        num_nodes = max(1, world_size // max(local_world_size, 1))
        rank = env_int(environ, rank_var)
        return ProcessInfo(
            rank=rank,
            local_rank=env_int(environ, local_var, 0),
            world_size=world_size,
            local_world_size=local_world_size,
            node_rank=rank // max(local_world_size, 1),
            num_nodes=num_nodes,
            master_addr=master_addr or "127.0.0.1",
            master_port=env_int(environ, "MASTER_PORT", _DEFAULT_PORT),
            source=self.name,
        )
