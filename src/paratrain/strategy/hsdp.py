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
        world, o = self.process.world_size, self.options
        if o.replicate is not None or o.shard is not None:
            shard = o.shard if o.shard is not None else world // o.replicate
            return world // shard, shard
        if self.process.num_nodes * self.process.local_world_size != world:
            raise ConfigError(
                f"hsdp shards inside a node, and the nodes run different numbers of processes ({world} over "
                f"{self.process.num_nodes} nodes); run as many on each node, or give {option('replicate')} and "
                f"{option('shard')}"
            )
        return self.process.num_nodes, self.process.local_world_size

    def device_mesh(self) -> Any:
        """The 2-D mesh ``(replicate, shard)``. Collective (it makes a process group per row and column)."""
        from torch.distributed.device_mesh import init_device_mesh

        replicate, shard = self.mesh_shape()
        return init_device_mesh(self.device.type, (replicate, shard), mesh_dim_names=("replicate", "shard"))
