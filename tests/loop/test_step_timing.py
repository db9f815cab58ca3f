"""A step's timing: the fit loop's clock (on CUDA every read waits for the GPU first; faked device calls),
and when the loop logs, evaluates and saves (decisions from step numbers alone, no processes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from paratrain.loop.config import FitConfig
from paratrain.loop.step_timing import Cadence, TrainWindow


@pytest.fixture
def events(monkeypatch):
    """What happened, in order: ``"sync"`` (torch.cuda.synchronize) and ``"read"`` (the clock)."""
    seen: list[str] = []
    ticks = iter(range(1000))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen.append("sync"))
    monkeypatch.setattr("paratrain.loop.step_timing.time",
                        SimpleNamespace(perf_counter=lambda: seen.append("read") or float(next(ticks))))
    return seen


def use_a_window(window: TrainWindow) -> None:
    window.add(torch.tensor(2.0), samples=8)
    window.pause(lambda: None)  # evaluation, logging
    assert window.train_seconds > 0
    loss, samples_per_second = window.take()
    assert float(loss) == 2.0 and samples_per_second > 0


def test_on_cuda_every_clock_read_comes_after_the_gpu_finished(events):
    # Kernels run asynchronously: without the wait, samples/s and the step time that the
    # communication report compares with the link count steps the GPU has not done yet.
    use_a_window(TrainWindow(torch.device("cuda", 0)))
    reads = [i for i, event in enumerate(events) if event == "read"]
    assert len(reads) == 5 and all(events[i - 1] == "sync" for i in reads)


def test_on_cpu_the_clock_is_read_without_synchronising(events):
    use_a_window(TrainWindow(torch.device("cpu")))
    assert events == ["read"] * 5


def test_evaluations_come_every_eval_every_steps_at_epoch_ends_when_asked_and_at_the_last_step():
    every_5 = Cadence(FitConfig(eval_every=5, eval_per_epoch=False))
    assert [step for step in range(1, 13) if every_5.evaluation_due(step, epoch_ends=False, total_steps=12)] == [5, 10, 12]
    assert not every_5.evaluation_due(7, epoch_ends=True, total_steps=12)  # eval_per_epoch off
    per_epoch = Cadence(FitConfig())
    assert per_epoch.evaluation_due(7, epoch_ends=True, total_steps=12)
    assert not per_epoch.evaluation_due(7, epoch_ends=False, total_steps=12)


def test_a_line_is_logged_every_log_every_steps_with_every_evaluation_and_at_the_last_step():
    cadence = Cadence(FitConfig(log_every=4))
    assert [step for step in range(1, 11) if cadence.log_due(step, step == 3, total_steps=10)] == [3, 4, 8, 10]


def test_a_save_every_step_already_saved_by_its_evaluation_is_not_saved_twice():
    cadence = Cadence(FitConfig(save_every=4))
    assert cadence.save_due(4) and not cadence.save_due(6)
    cadence.saved(4, with_metrics=True)
    assert not cadence.save_due(4) and cadence.save_due(8)


def test_a_step_saved_before_its_evaluation_counts_as_unsaved_until_saved_with_the_metrics():
    cadence = Cadence(FitConfig())
    assert cadence.unsaved(3)
    cadence.saved(3, with_metrics=False)  # e.g. a preemption save, then the evaluation at the same step
    assert not cadence.unsaved(3)
    cadence.evaluated(3)
    assert cadence.unsaved(3)  # the best checkpoint is chosen by the metrics a checkpoint carries
    cadence.saved(3, with_metrics=True)
    assert not cadence.unsaved(3)
