"""Collective helpers: single-process defaults, and real 2/3-process results over gloo."""

import torch

import paratrain as pt
from tests.comm_workers import collectives, late_rank


def test_single_process_defaults():
    assert (pt.rank(), pt.world_size(), pt.is_main()) == (0, 1, True)
    assert pt.all_reduce(3.5) == 3.5
    t = torch.arange(3)
    assert pt.all_reduce(t, op="sum").tolist() == [0, 1, 2]
    assert pt.all_gather(t)[0] is t
    assert pt.broadcast_object({"a": 1}) == {"a": 1}
    assert pt.gather_object(7) == [7] and pt.all_gather_object(7) == [7]
    pt.barrier(timeout=1)
    with pt.main_first():
        pass


def test_unknown_op_is_refused():
    import pytest

    with pytest.raises(pt.ConfigError, match="not one of"):
        pt.all_reduce(1.0, op="avg")


def test_collectives_on_three_ranks():
    out = pt.spawn(collectives, 3)
    assert out["sum"] == 6
    assert out["mean"] == 1.0
    assert out["max"] == [2, 0] and out["min"] == [0, -2]
    assert out["int_mean"] == 3.0
    assert out["broadcast"] == {"from": 0}
    assert out["gather"] == ["r0", "r1", "r2"]
    assert out["all_gather_object"] == [0, 10, 20]
    assert out["all_gather"] == [[[0.0, 0.0]], [[1.0, 1.0]] * 2, [[2.0, 2.0]] * 3]
    assert out["scalar_gather"] == [[0.0], [1.0], [2.0]]
    # main_first: rank 0 ran its body before every other rank started theirs
    assert out["main_first_t"] == min(out["all_first_t"])


def test_barrier_timeout_names_the_late_rank():
    out = pt.spawn(late_rank, 2)
    assert out["late"] == [1], out
    assert "rank(s) 1 did not arrive within 2s" in out["message"]
    assert "epoch-end barrier" in out["message"]
