"""The warmup/decay LR schedule, and resuming it in a run with more steps."""

from __future__ import annotations

import pytest
import torch

from paratrain.loop.schedule import stretch_to, warmup_schedule


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1.0)


def _run(scheduler, steps: int) -> list[float]:
    rates = []
    for _ in range(steps):
        scheduler.optimizer.step()
        scheduler.step()
        rates.append(scheduler.get_last_lr()[0])
    return rates


def test_warmup_then_linear_decay_to_zero():
    rates = _run(warmup_schedule(_optimizer(), total_steps=10, warmup_fraction=0.2), 10)
    assert rates[0] == pytest.approx(2 / 3)  # still warming up (warmup = 2 steps)
    assert rates[1] == pytest.approx(1.0)  # warmup done: the full rate, then down
    assert rates[-1] == 0.0 and all(a >= b for a, b in zip(rates[1:], rates[2:]))


def test_a_resumed_run_with_more_steps_stretches_the_schedule():
    first = warmup_schedule(_optimizer(), total_steps=10, warmup_fraction=0.0)
    _run(first, 10)
    assert first.get_last_lr()[0] == 0.0  # the first run ended its schedule
    saved = first.state_dict()

    resumed = warmup_schedule(_optimizer(), total_steps=20, warmup_fraction=0.0)
    resumed.load_state_dict(saved)  # torch restores the old end (total=10) with it
    assert stretch_to(resumed, total_steps=20, warmup_fraction=0.0) == 10
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(0.5)  # step 10 of 20
    rates = _run(resumed, 10)
    assert rates[0] == pytest.approx(0.45) and rates[-1] == 0.0
    # the same run resumed with its own length: nothing to change
    again = warmup_schedule(_optimizer(), total_steps=10, warmup_fraction=0.0)
    again.load_state_dict(saved)
    assert stretch_to(again, total_steps=10, warmup_fraction=0.0) is None
