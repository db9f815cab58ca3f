"""No silent divergence on 2 real processes: steps on what rt.setup did not return, and drifting weights."""

from __future__ import annotations

import pytest

import paratrain as pt
from tests.strategy.guard_workers import guard_runs

#: The drifting-weights cases: the strategy, and the parameter or buffer nudged on rank 1.
NUDGED = [("ddp", "0.weight"), ("fsdp", "1.scale")]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """One 2-process job: every rank's refusals of steps on what rt.setup did not return, then a fit per
    :data:`NUDGED` case, each rank writing the error it got to ``DIRECTORY/<strategy>/rank<r>.txt``."""
    directory = tmp_path_factory.mktemp("guard")
    return pt.spawn(guard_runs, nprocs=2, args=(NUDGED, str(directory))), directory


@pytest.fixture
def ranks(job):
    return job[0]


def test_a_model_never_set_up_is_refused_on_every_rank_before_it_steps(ranks):
    for out in ranks:
        assert out["backward"].startswith("ConfigError: rt.backward(): the loss does not come from a model that rt.setup() returned")
        assert "model = rt.setup(model)" in out["backward"] and "\n" not in out["backward"]
        assert "rt.step(): this SGD trains parameters of a model that rt.setup() did not return" in out["step"]
        assert out["unchanged"]  # refused before anything moved


def test_forward_through_model_module_and_accumulate_on_the_original_are_refused(ranks):
    for out in ranks:
        assert "not the original module, not model.module" in out["inner_module"]
        assert "rt.accumulate(model) needs the model that rt.setup() returned" in out["accumulate_original"]


def test_the_set_up_model_and_an_optimizer_built_after_setup_step(ranks):
    for out in ranks:
        assert out["set_up_step"] is None and out["late_optimizer"] is None


def test_one_process_stays_permissive():
    import torch

    rt = pt.Runtime(strategy="single")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rt.backward(model(torch.ones(1, 2)).sum())
    rt.step(optimizer)


@pytest.mark.parametrize("strategy, name", NUDGED)
def test_a_rank_nudged_at_step_3_is_reported_at_the_check_of_step_4(job, strategy, name):
    _, directory = job
    for rank in (0, 1):
        message = (directory / strategy / f"rank{rank}.txt").read_text()
        assert message.startswith("DistributedError: model weights differ across ranks at step 4: "
                                  f"{name!r} on rank(s) 1 differs from rank 0"), message
