"""Hybrid sharding (HSDP): FSDP2 ``fully_shard`` on a 2-D ``DeviceMesh`` ``(replicate, shard)``.

Inside a node the model is sharded as ``fsdp`` shards it; across nodes every node holds a
whole replica of those shards. A step's all-gathers and reduce-scatters stay on the node's
fast links; between nodes only one all-reduce of each rank's gradient shard goes out (a
node's 1/``shard`` of the gradients), where ``fsdp`` over every rank sends its all-gathers
and reduce-scatters through the slower network link in every forward and backward. Memory
per rank is 1/``shard`` of the model, not 1/world size.

The mesh is ``(nodes, processes per node)`` by default — the topology every rank agreed on
at start-up (``runtime/topology.py``), so the ranks of one node make one shard group —
and the ``replicate`` / ``shard`` options set it otherwise (their product is the world size;
ranks ``r·shard … r·shard + shard - 1`` shard together). Everything else (which submodules
are units, precision policies, accumulation, clipping, DCP checkpoints that reshard to
``fsdp``, ``ddp`` or ``single``) is ``fsdp``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from paratrain.arguments import option, option_field
from paratrain.errors import ConfigError
from paratrain.strategy import register_strategy
from paratrain.strategy.fsdp import FSDPStrategy


@register_strategy
class HSDPStrategy(FSDPStrategy):
    """FSDP2 sharded inside each node and replicated across nodes (``pt.HSDP()``), with
    :class:`HSDPStrategy.Options`: ``fsdp``'s and the mesh's shape."""

    name = "hsdp"

    @dataclass(frozen=True)
    class Options(FSDPStrategy.Options):
        replicate: int | None = option_field(
            None, "replicas of the model (the mesh's first dimension; default: the number of nodes)", metavar="N")
        shard: int | None = option_field(
            None, "processes that share one replica's shards (default: processes per node)", metavar="N")

        def __post_init__(self) -> None:
            """Check each value against its annotation, and that ``replicate`` and ``shard`` are positive.

            Raises:
            ConfigError: a value of the wrong type; a ``replicate`` or ``shard`` below 1.
            """
            super().__post_init__()
            for name in ("replicate", "shard"):
                value = getattr(self, name)
                if value is not None and value < 1:
                    raise ConfigError(f"hsdp {option(name)} must be a positive integer, got {value!r}")

    @classmethod
    def check(cls, world_size, options, sync_batchnorm=False, compile=False) -> None:
        """Whether this job can run the 2-D mesh: two processes or more, ``replicate`` × ``shard`` fitting the
        world size (no process group needed).

        Raises:
        ConfigError: one process; a ``replicate`` × ``shard`` that is not the world size.
        """
        super().check(world_size, options, sync_batchnorm, compile)
        replicate, shard = options.replicate, options.shard
        given = (replicate or 1) * (shard or 1)
        if world_size % given or (replicate is not None and shard is not None and given != world_size):
            asked = ", ".join(option(name, value) for name, value in (("replicate", replicate), ("shard", shard))
                              if value is not None)
            raise ConfigError(f"hsdp replicate × shard must be the number of processes, {world_size}; got {asked} "
                              "(give one and the other follows)")

    def mesh_shape(self) -> tuple[int, int]:
        """``(replicate, shard)``: the options where given, else nodes × processes per node.

        Raises:
            ConfigError: the nodes run different numbers of processes and no shape was given.
        """
        p = self.process
        # Agreed, not this rank's own count: with nodes of 1, 2 and 3 processes the node of 2 would see 3 × 2 = 6.
        even = not p.uneven_nodes and p.num_nodes * p.local_world_size == p.world_size
        return plan_mesh(p.world_size, p.num_nodes, p.local_world_size if even else None, self.options.replicate,
                         self.options.shard)

    def layout(self) -> str:
        """``mesh replicate R × shard S``: the 2-D mesh this job builds."""
        replicate, shard = self.mesh_shape()
        return f"mesh replicate {replicate} × shard {shard}"

    def device_mesh(self) -> Any:
        """The 2-D mesh ``(replicate, shard)``. Collective (it makes a process group per row and column)."""
        from torch.distributed.device_mesh import init_device_mesh

        replicate, shard = self.mesh_shape()
        return init_device_mesh(self.device.type, (replicate, shard), mesh_dim_names=("replicate", "shard"))


def plan_mesh(world_size: int, num_nodes: int, per_node: int | None, replicate: int | None = None,
              shard: int | None = None) -> tuple[int, int]:
    """``(replicate, shard)`` of a job of ``world_size`` processes on ``num_nodes`` nodes running
    ``per_node`` each (None: the nodes run different numbers): ``replicate`` / ``shard`` where given
    (checked by :meth:`HSDPStrategy.check`), else one replica per node. Needs no process group
    (``paratrain doctor`` asks it too).

    Raises:
        ConfigError: the nodes run different numbers of processes and no shape was given.
    """
    if replicate is not None or shard is not None:
        shard = shard if shard is not None else world_size // replicate
        return world_size // shard, shard
    if per_node is None:
        raise ConfigError(
            f"hsdp shards inside a node, and the nodes run different numbers of processes ({world_size} over "
            f"{num_nodes} nodes); run as many on each node, or give {option('replicate')} and {option('shard')}"
        )
    return num_nodes, per_node


def describe_mesh(replicate: int, shard: int) -> str:
    """``replicate 2 × shard 2 (ranks 0-1, 2-3 each hold one replica's shards)``."""
    groups = [f"{r * shard}-{r * shard + shard - 1}" if shard > 1 else str(r) for r in range(min(replicate, 3))]
    listed = ", ".join(groups) + (", …" if replicate > 3 else "")
    return f"replicate {replicate} × shard {shard} (ranks {listed} each hold one replica's shards)"
