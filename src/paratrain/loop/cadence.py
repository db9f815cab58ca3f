"""When the fit loop logs, evaluates and saves, and at which step it last did.

Decisions only — no I/O, no communication: every rank takes the same ones from the same
step numbers, so the collectives behind them (the loss all-reduce, the evaluation, the
checkpoint) are entered together.
"""

from __future__ import annotations

from paratrain.loop.config import FitConfig


class Cadence:
    """The fit loop's timetable for ``config`` (``eval_every``, ``eval_per_epoch``, ``log_every``,
    ``save_every``) and its record of what was done at which step."""

    def __init__(self, config: FitConfig):
        self.config = config
        self.evaluated_at = -1
        self.saved_at = -1  # a resumed run starts at its checkpoint's step: never written twice
        self.saved_metrics_at = -1  # the last step saved with its evaluation's metrics
        #: ``save_every="auto"``: the checkpointer's answer (the interval agreed at every save)
        self.auto_due = None

    def evaluation_due(self, step: int, epoch_ends: bool, total_steps: int) -> bool:
        """An evaluation at ``step``: every ``eval_every`` steps, at an epoch's end (``eval_per_epoch``),
        and at the last step. A save at the same step always comes after it, so that checkpoint
        carries the metrics the best one is chosen by."""
        c = self.config
        return (bool(c.eval_every) and step % c.eval_every == 0) or (epoch_ends and c.eval_per_epoch) \
            or step >= total_steps

    def log_due(self, step: int, evaluation_due: bool, total_steps: int) -> bool:
        """A training line at ``step``: every ``log_every`` steps, with every evaluation, at the last step."""
        return evaluation_due or step % self.config.log_every == 0 or step >= total_steps

    def save_due(self, step: int) -> bool:
        """A ``save_every`` step not saved yet (by the evaluation at the same step)."""
        every = self.config.save_every
        if every == "auto":
            return self.auto_due is not None and self.auto_due(step) and self.saved_at != step
        return bool(every) and step % every == 0 and self.saved_at != step

    def epoch_save_due(self, step: int) -> bool:
        """A save at the end of an epoch: always, except under ``save_every="auto"``, whose interval comes from
        measurements and not from the epoch length — there only an evaluation's metrics are saved then."""
        if self.config.save_every == "auto":
            return self.evaluated_at == step and self.unsaved(step)
        return self.unsaved(step)

    def unsaved(self, step: int) -> bool:
        """No checkpoint of ``step`` yet, or one taken before its evaluation (without its metrics)."""
        return self.saved_at != step or (self.evaluated_at == step and self.saved_metrics_at != step)

    def evaluated(self, step: int) -> None:
        self.evaluated_at = step

    def saved(self, step: int, with_metrics: bool) -> None:
        self.saved_at = step
        self.saved_metrics_at = step if with_metrics else -1
