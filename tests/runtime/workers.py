"""Top-level worker functions for the runtime tests (spawned children import them)."""

from __future__ import annotations

import torch

import paratrain as pt


def groups_one_after_another(times: int) -> list[float]:
    """Make, use and close a Runtime ``times`` times in this process; the sums all-reduced."""
    sums = []
    for round_ in range(times):
        rt = pt.Runtime(strategy="ddp", timeout=60)
        model = rt.setup(torch.nn.Linear(4, 1))
        sums.append(float(pt.all_reduce(torch.tensor(float(rt.rank + round_)), op="sum")))
        del model  # the DDP wrapper goes before its group (see Runtime.close)
        assert rt.owns_process_group  # close() collects garbage, then leaves the group it made
        rt.close()
        assert not rt.owns_process_group
    return sums


def in_the_users_own_group() -> tuple[bool, float, bool]:
    """``dist.init_process_group`` first, then a Runtime: it trains in that group and leaves it
    alone. Returns (the any-rank flag, the all-reduced sum, whether the group outlived close)."""
    import torch.distributed as dist

    from paratrain import comm

    dist.init_process_group("gloo")
    rt = pt.Runtime(strategy="ddp", timeout=60)
    flag = bool(comm.any_rank(torch.tensor([rt.rank == 1])).item())  # the preemption poll's collective
    total = float(pt.all_reduce(torch.tensor(float(rt.rank + 1)), op="sum"))
    assert not rt.owns_process_group  # the user's group: pt.fit collects before leaving it (Trainer.release_wrappers)
    rt.close()
    kept = dist.is_initialized()
    dist.destroy_process_group()
    return flag, total, kept


def users_group_then_groups_one_after_another(times: int) -> tuple[tuple[bool, float, bool], list[float]]:
    """:func:`in_the_users_own_group`, then :func:`groups_one_after_another` in the same processes: one
    start of the job for both (the user's group is gone before the Runtimes make theirs)."""
    return in_the_users_own_group(), groups_one_after_another(times)
