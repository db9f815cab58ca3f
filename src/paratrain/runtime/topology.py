"""Which ranks run on which node, as every rank agrees: exchanged once when the group is made.

A launcher tells each worker only about itself (its rank, its node's process count). A
worker that derives the job's shape from that — ``WORLD_SIZE // LOCAL_WORLD_SIZE`` nodes —
gets 3 nodes on a node running 1 process and 1 node on a node running 2 of the same
3-process job, and the ranks then disagree on which collectives to enter (the link probe
runs only "with several nodes"): a hang. So the Runtime gathers every rank's own facts
once, right after the process group is made, and every rank derives the node count and
its node's rank and size from the same list. Nodes may run different numbers of
processes (torchrun allows it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from paratrain.env import ProcessInfo
from paratrain.env.machine import machine_key, machine_label
from paratrain.errors import ConfigError


@dataclass(frozen=True)
class RankFacts:
    """What one rank knows about its own place.

    Attributes:
        node: the launcher's name for this rank's node: its node rank (torchrun's
            ``GROUP_RANK``, SLURM's node id) or, where the launcher gives none that can be
            trusted (MPI), the host name.
        host: the host name, for messages.
        local_world_size: processes on this node, as its launcher said.
        nodes_started: the node count this rank's launcher was started with (torchrun's
            ``GROUP_WORLD_SIZE``, i.e. ``--nnodes``), ``None`` when it says none.
    """

    node: int | str
    host: str
    local_world_size: int
    nodes_started: int | None


def own_facts(info: ProcessInfo, environ: Mapping[str, str] | None = None) -> RankFacts:
    """This rank's :class:`RankFacts`, from the launcher's answer and its environment."""
    environ = os.environ if environ is None else environ
    host = machine_label(info.master_addr)
    # Without a node rank to trust, the machine itself (two PCs may share a host name).
    node: int | str = info.node_rank if info.source in ("torchrun", "slurm", "single") else machine_key(info.master_addr)
    started = environ.get("GROUP_WORLD_SIZE", "") if info.source == "torchrun" else ""
    return RankFacts(node, host, info.local_world_size, int(started) if started.isdigit() else None)


@dataclass(frozen=True)
class Topology:
    """Every rank's :class:`RankFacts`, in rank order; identical on every rank."""

    ranks: tuple[RankFacts, ...]

    @property
    def nodes(self) -> list[int | str]:
        """The nodes in the order of their lowest rank: the index is the node rank."""
        return list(dict.fromkeys(facts.node for facts in self.ranks))

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def ranks_of(self, node_rank: int) -> list[int]:
        """The global ranks that run on node ``node_rank``."""
        node = self.nodes[node_rank]
        return [rank for rank, facts in enumerate(self.ranks) if facts.node == node]

    def node_rank_of(self, rank: int) -> int:
        return self.nodes.index(self.ranks[rank].node)

    @property
    def uneven(self) -> bool:
        return len({len(self.ranks_of(n)) for n in range(self.num_nodes)}) > 1

    def describe(self) -> str:
        """``2 nodes: node 0 (vm-a) runs rank 0, node 1 (vm-b) runs ranks 1-2``."""
        parts = []
        for node_rank in range(self.num_nodes):
            ranks = self.ranks_of(node_rank)
            span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
            parts.append(f"node {node_rank} ({self.ranks[ranks[0]].host}) runs {span}")
        return f"{self.num_nodes} nodes: " + ", ".join(parts)

    def check(self) -> None:
        """Refuse a job whose nodes were started with different node counts.

        Raises:
            ConfigError: on every rank alike (they hold the same list), naming the nodes
                and the ``--nnodes`` each was given.
        """
        started: dict[int, int] = {}
        for node_rank in range(self.num_nodes):
            count = self.ranks[self.ranks_of(node_rank)[0]].nodes_started
            if count is not None:
                started[node_rank] = count
        if len(set(started.values())) > 1:
            said = ", ".join(f"node {n} ({self.ranks[self.ranks_of(n)[0]].host}) with --nnodes {c}"
                             for n, c in started.items())
            raise ConfigError(
                f"the nodes were started with different --nnodes: {said}; start every node with the same "
                "--nnodes (the number of machines in the job)"
            )

    def place(self, info: ProcessInfo) -> ProcessInfo:
        """``info`` with node rank, node count, local world size and whether the nodes differ in size, taken
        from the exchange (the same answer on every rank)."""
        node_rank = self.node_rank_of(info.rank)
        return replace(info, node_rank=node_rank, num_nodes=self.num_nodes,
                       local_world_size=len(self.ranks_of(node_rank)), uneven_nodes=self.uneven)


def from_facts(facts: Sequence[RankFacts]) -> Topology:
    return Topology(tuple(facts))


def exchange(info: ProcessInfo) -> Topology:
    """Gather every rank's facts; the same :class:`Topology` on every rank.

    Collective: every rank calls it once, right after joining the process group (the
    Runtime does), and it is the first collective there; it waits at most the group's
    timeout. With one process it sends nothing.
    """
    from paratrain import comm

    return from_facts(comm.all_gather_object(own_facts(info)))


def settle(info: ProcessInfo) -> tuple[Topology, ProcessInfo]:
    """The job's :class:`Topology` and ``info`` placed in it (node rank, node count, local size).

    Collective with several processes (:func:`exchange`, then :meth:`Topology.check`); one
    process sends nothing. Nodes running different numbers of processes are logged once.

    Raises:
        ConfigError: the nodes were started with different ``--nnodes``.
    """
    if not info.distributed:
        return from_facts([own_facts(info)]), info
    found = exchange(info)
    found.check()
    placed = found.place(info)
    if found.uneven and placed.is_main:
        from paratrain import comm

        comm.get_logger().info(f"{found.describe()} (nodes run different numbers of processes)")
    return found, placed
