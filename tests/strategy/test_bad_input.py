"""Identical weights whatever the seeds, and the refusals a multi-process job can hit (2 real processes)."""

from __future__ import annotations

import pytest

import paratrain as pt
from tests.strategy.workers import weights_and_bad_input


@pytest.fixture(scope="module")
def out():
    return pt.spawn(weights_and_bad_input, nprocs=2)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_ranks_seeded_differently_train_rank_0s_weights_after_setup(out, strategy):
    before = out[f"{strategy}_check_before_setup"]
    assert before["type"] == "DistributedError"
    assert "'inp.weight' on rank(s) 1 differs from rank 0" in before["message"]
    assert out[f"{strategy}_check_after_setup"] is None
    assert out[f"{strategy}_equals_rank0_initial"] is True
    if strategy == "ddp":
        assert out["ddp_ranks_identical"] is True


def test_a_rank_that_changes_its_weights_alone_is_named(out):
    error = out["desync_detected"]
    assert error["type"] == "DistributedError"
    assert "'blocks.1.linear.bias' on rank(s) 1" in error["message"]
    assert "(1 tensor(s) differ)" in error["message"]


def test_dp_refuses_more_than_one_process(out):
    error = out["dp_with_two_processes"]
    assert error["type"] == "ConfigError"
    assert "2 processes" in error["message"] and "strategy='ddp'" in error["message"]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_setup_twice_is_refused(out, strategy):
    error = out[f"{strategy}_setup_twice"]
    assert error["type"] == "ConfigError"
    assert "already called on this model" in error["message"]


def test_fsdp_refuses_a_model_without_parameters(out):
    error = out["fsdp_no_parameters"]
    assert error["type"] == "ConfigError"
    assert "Sequential has none" in error["message"]


def test_fsdp_refuses_an_optimizer_that_already_stepped(out):
    error = out["fsdp_optimizer_with_state"]
    assert error["type"] == "ConfigError"
    assert "SGD already has state" in error["message"] and "before stepping" in error["message"]


def test_fsdp_wrap_units(out):
    assert out["fsdp_blocks_by_class"] == ["Block", "Block"]
    assert out["fsdp_blocks_by_size"] == ["Linear", "Linear"]  # the two 272-parameter block layers
    error = out["fsdp_unknown_wrap_class"]
    assert error["type"] == "ConfigError" and "classes present" in error["message"] and "Block" in error["message"]


def test_ddp_unused_parameters_error_names_them_and_the_fix(out):
    error = out["unused_parameters"]
    assert error["type"] == "DistributedError"
    assert "unused.weight, unused.bias" in error["message"]
    assert "find_unused_parameters=True" in error["message"]
    assert "\n" not in error["message"]
    assert out["unused_parameters_allowed"] is None
