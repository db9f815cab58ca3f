"""Processes started by ``srun python script.py`` (one task per GPU, no torchrun)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from paratrain.env.api import ClusterEnvironment, ProcessInfo, env_int
from paratrain.errors import ConfigError

# torchrun's default; every task of one job derives the same port from the job id
# so no one has to pick it by hand (Lightning does the same).
_BASE_PORT = 15000


def first_host(nodelist: str) -> str:
    """First host of a SLURM hostlist: ``"gpu[07-09,12],cpu1"`` → ``"gpu07"``.

    Raises:
        ConfigError: the list is empty or not in SLURM's hostlist syntax.
    """
    nodelist = nodelist.strip()
    match = re.match(r"^([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if not nodelist or not match:
        raise ConfigError(f"cannot read SLURM_NODELIST={nodelist!r}; set MASTER_ADDR to the first node's address")
    prefix, ranges = match.group(1), match.group(2)
    if ranges is None:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def tasks_on_node(counts: str, node_id: int) -> int | None:
    """Tasks on node ``node_id`` from SLURM's compressed list: ``"2(x3),1"``, 3 → 1.

    ``None`` when the list is empty, malformed or shorter than ``node_id``.
    """
    expanded: list[int] = []
    for part in counts.split(",") if counts.strip() else []:
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            return None
        expanded += [int(match.group(1))] * int(match.group(2) or 1)
    if len(expanded) == 1:  # SLURM_NTASKS_PER_NODE: one count for every node
        return expanded[0]
    return expanded[node_id] if 0 <= node_id < len(expanded) else None


class SlurmEnvironment(ClusterEnvironment):
    name = "slurm"

    def detected(self, environ: Mapping[str, str]) -> bool:
        # `salloc` followed by plain `python` sets SLURM_NTASKS but not SLURM_PROCID
        # per task; only srun-started tasks have SLURM_PROCID and SLURM_STEP_ID.
        return "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ and "SLURM_STEP_ID" in environ

    def position(self, environ: Mapping[str, str]) -> tuple[int, int, int]:
        return env_int(environ, "SLURM_PROCID"), env_int(environ, "SLURM_NTASKS"), env_int(environ, "SLURM_LOCALID", 0)

    def read(self, environ: Mapping[str, str]) -> ProcessInfo:
        world_size = env_int(environ, "SLURM_NTASKS")
        num_nodes = env_int(environ, "SLURM_NNODES", 1)
        node_id = env_int(environ, "SLURM_NODEID", 0)
        # This node's own count: a step may run more tasks on some nodes than on others.
        counts = (environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
                  or environ.get("SLURM_NTASKS_PER_NODE", ""))
        local_world_size = tasks_on_node(counts, node_id) or max(1, world_size // num_nodes)
        master_addr = environ.get("MASTER_ADDR") or first_host(
            environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST", "")
        )
        job_id = env_int(environ, "SLURM_JOB_ID", 0)
        master_port = env_int(environ, "MASTER_PORT", _BASE_PORT + job_id % 10000)
        return ProcessInfo(
            rank=env_int(environ, "SLURM_PROCID"),
            local_rank=env_int(environ, "SLURM_LOCALID", 0),
            world_size=world_size,
            local_world_size=local_world_size,
            node_rank=node_id,
            num_nodes=num_nodes,
            master_addr=master_addr,
            master_port=master_port,
            source=self.name,
        )

    def launch_defaults(self, environ: Mapping[str, str]) -> dict | None:
        """nnodes, node_rank, master address and port of an ``srun paratrain run`` step (None on one node).

        One launcher per node is the contract (it starts the node's workers); a step with
        several tasks per node would start several launchers that fight over the GPUs.

        Raises:
            ConfigError: more than one task per node, or an unreadable node list.
        """
        info = self.read(environ)  # master address from the node list, port from the job id
        nnodes = env_int(environ, "SLURM_STEP_NUM_NODES", info.num_nodes)
        if info.world_size != nnodes:
            raise ConfigError(
                f"this SLURM step runs {info.world_size} tasks on {nnodes} nodes; paratrain run starts the workers "
                "itself, so use one task per node: srun --ntasks-per-node=1 paratrain run ... (or give --nnodes "
                "and --node-rank yourself: the flags replace what SLURM says)"
            )
        if nnodes == 1:
            return None  # one node: the loopback rendezvous is the right default
        return {"nnodes": nnodes, "node_rank": info.rank, "master_addr": info.master_addr,
                "master_port": info.master_port}
