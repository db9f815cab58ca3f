"""Which launcher started us: torchrun, SLURM, OpenMPI/PMI, or nothing."""

import pytest

from paratrain.env import detect
from paratrain.env.slurm import first_host, tasks_on_node
from paratrain.errors import ConfigError

TORCHRUN = {
    "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "x",
}
SLURM = {
    "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_NNODES": "2",
    "SLURM_NODEID": "1", "SLURM_NTASKS_PER_NODE": "4(x2)", "SLURM_STEP_ID": "0",
    "SLURM_JOB_ID": "123456", "SLURM_STEP_NODELIST": "gpu[07-08]",
}
OPENMPI = {
    "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "node0",
}


def test_plain_python_is_one_process():
    info = detect({})
    assert (info.source, info.rank, info.world_size, info.local_rank, info.is_main) == ("single", 0, 1, 0, True)
    assert not info.distributed


def test_torchrun():
    info = detect(TORCHRUN)
    assert info.source == "torchrun"
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (3, 1, 4, 2)
    assert (info.node_rank, info.num_nodes, info.master_addr, info.master_port) == (1, 2, "10.0.0.1", 29400)


def test_torchrun_wins_inside_slurm():
    # `srun paratrain run ...`: the worker sees both; torchrun's variables describe it.
    info = detect({**SLURM, **TORCHRUN})
    assert info.source == "torchrun" and info.rank == 3


def test_slurm_task():
    info = detect(SLURM)
    assert info.source == "slurm"
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (5, 1, 8, 4)
    assert (info.node_rank, info.num_nodes, info.master_addr) == (1, 2, "gpu07")
    assert info.master_port == 15000 + 123456 % 10000  # same on every task of the job


def test_slurm_master_addr_can_be_overridden():
    assert detect({**SLURM, "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "1234"}).master_addr == "10.1.1.1"


def test_salloc_without_srun_is_a_single_process():
    env = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_ID"}
    env.pop("SLURM_PROCID")
    assert detect(env).source == "single"


@pytest.mark.parametrize(
    "nodelist, first",
    [("gpu[07-09,12]", "gpu07"), ("node1,node2", "node1"), ("cn[003]", "cn003"), ("host", "host")],
)
def test_slurm_hostlist(nodelist, first):
    assert first_host(nodelist) == first


def test_openmpi():
    info = detect(OPENMPI)
    assert info.source == "mpi"
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.node_rank) == (2, 4, 0, 2, 1)
    assert info.master_addr == "node0"
    assert 20000 <= info.master_port < 30000  # derived from the job id, the same on every rank


def test_mpi_on_one_node_needs_no_master_addr():
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "1978531841"}
    info = detect(env)
    assert (info.master_addr, info.num_nodes) == ("127.0.0.1", 1)
    assert info.master_port == detect({**env, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}).master_port
    assert info.master_port != detect({**env, "OMPI_MCA_ess_base_jobid": "7"}).master_port


def test_pmi_family():
    info = detect({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
                   "MASTER_ADDR": "h0", "MASTER_PORT": "4000"})
    assert (info.source, info.rank, info.world_size, info.local_rank, info.master_port) == ("mpi", 1, 2, 1, 4000)


def test_mpi_without_master_addr_names_the_fix():
    env = {k: v for k, v in OPENMPI.items() if k != "MASTER_ADDR"}
    with pytest.raises(ConfigError, match="on 2 nodes without MASTER_ADDR.*mpirun -x MASTER_ADDR="):
        detect(env)


def test_malformed_variable_is_named():
    with pytest.raises(ConfigError, match="RANK='x'"):
        detect({**TORCHRUN, "RANK": "x"})


def test_rank_outside_world_is_refused():
    with pytest.raises(ConfigError, match="outside world size"):
        detect({**TORCHRUN, "RANK": "4"})


def test_slurm_nodes_with_different_task_counts_read_their_own():
    # srun -n 3 over 2 nodes: node 0 runs 2 tasks, node 1 runs 1.
    uneven = {**SLURM, "SLURM_NTASKS": "3", "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
              "SLURM_STEP_TASKS_PER_NODE": "2,1"}
    del uneven["SLURM_NTASKS_PER_NODE"]
    assert detect(uneven).local_world_size == 1
    assert tasks_on_node("2(x3),1", 2) == 2 and tasks_on_node("2(x3),1", 3) == 1 and tasks_on_node("4", 7) == 4
