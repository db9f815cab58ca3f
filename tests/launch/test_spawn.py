"""pt.spawn on 2 real processes: rank 0's value comes back; a worker's exception names its rank."""

import pytest

import paratrain as pt
from tests.launch.spawn_workers import fail_on_rank_one, reduce_ranks


def test_spawn_returns_rank_zero_value():
    out = pt.spawn(reduce_ranks, 2, args=(2.0,), env={"PARATRAIN_TEST_EXTRA": "passed"})
    assert out == {"rank": 0, "world": 2, "total": 6.0, "addr": "127.0.0.1", "gloo_ifname": "lo", "extra": "passed"}


def test_worker_exception_names_rank_and_type():
    with pytest.raises(pt.WorkerError) as caught:
        pt.spawn(fail_on_rank_one, 2)
    error = caught.value
    assert (error.rank, error.exc_type, error.remote_message) == (1, "ValueError", "bad batch shape on purpose")
    assert str(error).startswith("rank 1 raised ValueError: bad batch shape on purpose")
    assert "in fail_on_rank_one" in error.remote_traceback  # the worker's own traceback travels with it


def test_bad_arguments_are_refused_before_starting():
    with pytest.raises(pt.ConfigError, match="positive integer"):
        pt.spawn(reduce_ranks, 0)

    def local():
        return 1

    with pytest.raises(pt.ConfigError, match="module top level"):
        pt.spawn(local, 2)
