"""When the fit loop logs, evaluates and saves: decisions from step numbers alone (no processes)."""

from __future__ import annotations

from paratrain.loop.cadence import Cadence
from paratrain.loop.config import FitConfig


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
