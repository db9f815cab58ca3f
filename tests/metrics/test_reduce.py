"""Global-batch means in one process (the multi-rank weighting is in tests/data/test_multi_rank.py)."""

from __future__ import annotations

import math

import torch

import paratrain as pt


def test_single_process_mean_is_the_value():
    assert pt.global_mean(2.5, count=4) == 2.5
    assert pt.global_mean(torch.tensor(1.5)) == 1.5
    assert math.isnan(pt.global_mean(3.0, count=0))


def test_running_mean_weights_steps_by_their_sample_count():
    running = pt.RunningMean()
    running.update(torch.tensor(1.0), count=1)
    running.update(4.0, count=3)
    assert running.compute() == 3.25
    running.reset()
    assert math.isnan(running.compute())
