"""The job's shape from every rank's own facts (runtime/topology.py), never from one rank's arithmetic."""

import pytest

from paratrain.env import detect
from paratrain.errors import ConfigError
from paratrain.runtime.topology import RankFacts, from_facts, own_facts

# Node 0 runs 1 process, node 1 runs 2: as torchrun exports it to each of the 3 ranks.
UNEVEN = [
    {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0"},
    {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"},
    {"RANK": "2", "LOCAL_RANK": "1", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"},
]


def _torchrun(environ, nnodes="2"):
    return {**environ, "GROUP_WORLD_SIZE": nnodes, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def test_uneven_nodes_agree_on_two_nodes_whatever_each_rank_runs_locally():
    envs = [_torchrun(e) for e in UNEVEN]
    topology = from_facts([own_facts(detect(e), e) for e in envs])
    assert topology.num_nodes == 2 and topology.uneven
    assert topology.ranks_of(0) == [0] and topology.ranks_of(1) == [1, 2]
    placed = [topology.place(detect(e)) for e in envs]
    assert [(p.node_rank, p.num_nodes, p.local_world_size) for p in placed] == [(0, 2, 1), (1, 2, 2), (1, 2, 2)]
    assert topology.describe().endswith("node 0 (" + topology.ranks[0].host + ") runs rank 0, node 1 ("
                                        + topology.ranks[1].host + ") runs ranks 1-2")
    topology.check()  # uneven is allowed


def test_nodes_started_with_different_nnodes_are_refused_naming_both():
    facts = [RankFacts(0, "pc-a", 1, 2), RankFacts(1, "pc-b", 1, 3)]
    with pytest.raises(ConfigError) as refused:
        from_facts(facts).check()
    assert str(refused.value).startswith(
        "the nodes were started with different --nnodes: node 0 (pc-a) with --nnodes 2, node 1 (pc-b) with --nnodes 3;"
    )


def test_mpi_ranks_are_grouped_by_host_not_by_rank_arithmetic():
    # MPI names no node: 3 ranks, 1 on pc-a, 2 on pc-b; LOCAL_SIZE differs per host.
    facts = [RankFacts("pc-a", "pc-a", 1, None), RankFacts("pc-b", "pc-b", 2, None), RankFacts("pc-b", "pc-b", 2, None)]
    topology = from_facts(facts)
    assert (topology.num_nodes, topology.node_rank_of(2)) == (2, 1)
    topology.check()
