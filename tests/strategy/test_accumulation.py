"""Gradient accumulation on 2 real gloo processes: one meaning for both forms, epoch ends, checkpoints."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import paratrain as pt
from tests.strategy.accumulation_workers import BATCH, BATCHES_PER_EPOCH, accumulation_job, loader_data
from tests.strategy.recipes import SEED, Net, flat_state, run_single


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return pt.spawn(accumulation_job, nprocs=2, args=(str(tmp_path_factory.mktemp("accumulation")),))


def assert_same_state(got: dict, want: dict, rtol: float = 1e-6) -> None:
    assert got.keys() == want.keys()
    for name, values in want.items():
        torch.testing.assert_close(torch.tensor(got[name]), torch.tensor(values), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("variant", ["ddp_steps", "ddp_sync", "fsdp_steps", "fsdp_sync"])
def test_both_forms_train_like_one_batch_of_k_times_b(job, variant):
    # 2 ranks × 4 micro-batches × BATCH rows per step == one process with the whole batch
    single = run_single(batch=2 * 4 * BATCH, steps=5, clip=None)
    assert_same_state(job[variant], single["state"])


def test_seven_micro_batches_with_steps_2_step_four_times_every_epoch(job):
    assert job["per_epoch"]["stepped"] == [[1, 3, 5, 6], [1, 3, 5, 6]]


def test_the_short_last_step_is_the_mean_of_its_own_micro_batch(job):
    """The reference: plain torch, one batch per optimizer step — 16 samples, and 8 for the remainder."""
    pt.seed_everything(SEED)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = loader_data()
    global_batch = 2 * BATCH
    for _ in range(2):
        for cycle in ([0, 1], [2, 3], [4, 5], [6]):
            rows = [i for b in cycle for i in range(b * global_batch, (b + 1) * global_batch)]
            x, y = data.tensors[0][rows], data.tensors[1][rows]
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    assert BATCHES_PER_EPOCH == 7
    assert_same_state(job["per_epoch"]["state"], flat_state(model.state_dict()))


def test_resume_with_accumulation_is_bit_exact(job):
    assert job["uninterrupted"]["steps"] == job["resumed"]["steps"] == 12  # 3 epochs × 4 steps
    assert job["resumed"]["state"] == job["uninterrupted"]["state"]  # exact floats, not close


def test_saving_with_pending_gradients_is_refused_on_every_rank(job):
    assert "in the middle of gradient accumulation" in job["pending"]
    assert "after the rt.step" in job["pending"]
    assert job["errors_on_every_rank"]


def test_fsdp_optimizer_built_before_setup_and_not_given_is_refused(job):
    message = job["fsdp_optimizer"]
    assert "would train nothing" in message and "rt.setup(model, optimizer)" in message


def test_count_restarts_with_each_pass_of_the_loader():
    rt = pt.Runtime(strategy="single", seed=0)
    model = rt.setup(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = rt.loader(torch.utils.data.TensorDataset(torch.ones(5, 2)), batch_size=1)
    for _ in range(2):
        stepped = []
        for (x,) in loader:
            before = model.weight.detach().clone()
            with rt.accumulate(model, steps=3):
                rt.backward(model(x).sum())
                rt.step(optimizer)
            stepped.append(not torch.equal(before, model.weight))
        assert stepped == [False, False, True, False, True]
    with pytest.raises(pt.ConfigError, match="sync must be True or False"), rt.accumulate(model, sync="yes"):
        pass
