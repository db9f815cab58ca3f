"""Process groups made one after another in the same processes (2 real gloo ranks), and a
group the user made before the Runtime."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import paratrain as pt
from paratrain import comm
from paratrain.env import ProcessInfo
from paratrain.runtime.process_group import init_process_group
from tests.runtime.workers import users_group_then_groups_one_after_another


@pytest.fixture(scope="module")
def job() -> tuple:
    """One 2-process job: a Runtime in the user's own group, then five Runtimes one after another."""
    return pt.spawn(users_group_then_groups_one_after_another, nprocs=2, args=(5,))


def test_a_process_can_make_a_new_group_after_closing_one(job):
    # Each new group rendezvouses under a fresh store prefix: without it, the second or
    # third group reads the addresses the closed one published and fails to connect.
    assert job[1] == [1.0, 3.0, 5.0, 7.0, 9.0]


def test_a_runtime_works_in_the_group_the_user_made_and_leaves_it(job):
    assert job[0] == (True, 3.0, True)


def test_a_users_nccl_group_gets_the_gloo_control_group(monkeypatch):
    # A user's dist.init_process_group("nccl") cannot run on a CPU torch: the group is faked
    # as far as init_process_group looks at it. Without a gloo side group, the preemption
    # poll's CPU all-reduce (comm.any_rank, every step) would go to NCCL and fail.
    made = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(dist, "new_group", lambda **options: made.append(options) or "gloo side group")
    info = ProcessInfo(rank=1, local_rank=1, world_size=2, local_world_size=2, node_rank=0, num_nodes=1,
                       master_addr="127.0.0.1", master_port=29500, source="torchrun")
    try:
        assert init_process_group(info, "nccl", torch.device("cuda", 1), 30.0) is False  # not ours to destroy
        assert [m["backend"] for m in made] == ["gloo"] and comm._control() == "gloo side group"
    finally:
        comm.set_control_group(None)
