"""pt.spawn on 2 real processes: rank 0's value comes back; a worker's exception names its rank."""

import threading

import pytest
import torch

import paratrain as pt
from tests.launch.spawn_workers import fail_on_rank_one, reduce_ranks, stopped_while_reporting


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


def test_a_worker_stopped_while_reporting_still_gets_its_own_error():
    # torch reads an empty traceback file as "EOFError: Ran out of input"; the user gets the rank's error.
    with pytest.raises(pt.WorkerError) as caught:
        pt.spawn(stopped_while_reporting, 2)
    assert (caught.value.rank, caught.value.exc_type) == (1, "RuntimeError")
    assert "stall: rank 1 stopped in backward" in str(caught.value)


def test_bad_arguments_are_refused_before_starting():
    with pytest.raises(pt.ConfigError, match="positive integer"):
        pt.spawn(reduce_ranks, 0)

    with pytest.raises(pt.ConfigError, match="start_method 'thread'"):
        pt.spawn(reduce_ranks, 2, start_method="thread")
    with pytest.raises(pt.ConfigError, match="needs a function"):
        pt.spawn("train.py", 2)


def test_a_function_that_cannot_reach_a_worker_is_named_before_starting():
    lock = threading.Lock()

    def uses_lock():
        return lock.locked()

    with pytest.raises(pt.ConfigError) as caught:
        pt.spawn(uses_lock, 2)
    message = str(caught.value)
    assert message.startswith("test_a_function_that_cannot_reach_a_worker_is_named_before_starting.<locals>.uses_lock "
                              "cannot be sent to the worker processes (TypeError: cannot pickle '_thread.lock' object)")
    assert "create it inside the function instead" in message and "\n" not in message


def test_fork_after_cuda_was_initialised_is_refused(monkeypatch):
    # No GPU here: pretend this process has initialised CUDA, as a notebook cell that
    # moved a tensor to the GPU would have.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(pt.ConfigError, match="CUDA was initialised in this process before pt.spawn forked workers"):
        pt.spawn(reduce_ranks, 2, start_method="fork")


def test_the_fork_check_does_not_initialise_cuda_itself(monkeypatch):
    # torch.cuda.is_available() runs cudaGetDeviceCount, which initialises the driver in
    # this process: on a GPU machine the check would poison the fork it guards.
    from paratrain.launch.spawn import _check_fork_is_safe

    def initialises_the_driver():
        raise AssertionError("torch.cuda.is_available() called before fork")

    monkeypatch.setattr(torch.cuda, "is_available", initialises_the_driver)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", initialises_the_driver, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    _check_fork_is_safe("fork")
