"""The fit loop's use of :class:`paratrain.Checkpointer`: where, what, and which one is best.

Checkpoints live in ``OUT/checkpoints``; ``OUT`` itself also holds ``task.json``,
logs and metrics. The loop's own progress (:class:`~paratrain.loop.state.FitState`)
is saved as one more stateful object beside the model, optimizer, LR schedule and
training loader, so a resumed run continues at the same step, sample and best metric.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paratrain.checkpoint import Checkpointer
from paratrain.checkpoint.catalog import WorldChangeWarning
from paratrain.data.global_loader import ElasticResumeWarning
from paratrain.loop.preflight import changed_options, check_resumable

CHECKPOINT_DIR = "checkpoints"


def metric_mode(metric: str) -> str:
    """``"min"`` for losses, ``"max"`` for every other metric (accuracy, F1, mIoU)."""
    return "min" if metric.endswith("loss") else "max"


class LoopCheckpoints:
    """Resume and save for the fit loop. ``resume`` and ``save`` are collective."""

    def __init__(self, runtime: Any, out_dir: Path, keep_last: int, metric: str, trainer: Any,
                 background: bool = False, every: int | str | None = None, mtbf: float | None = None, **stateful: Any):
        self.directory = Path(out_dir) / CHECKPOINT_DIR
        self._trainer_state = trainer
        self.resumed_metrics: dict[str, float] = {}  # the evaluation the resumed checkpoint carries
        self.changed: list[tuple[str, object, object]] = []  # options this run applies from the resume step on
        self._checkpointer = Checkpointer(
            runtime, self.directory, keep_last=keep_last, best_metric=metric, mode=metric_mode(metric),
            background=background, every=every, mtbf=mtbf, trainer=trainer, **stateful,
        )
        self.due = self._checkpointer.due
        #: wait for the checkpoint being written in the background (collective; says so when it waits)
        self.finish_writing = self._checkpointer.finish_writing

    def resume(self, batch_size: int, grad_accum: int, dev_samples: int, loader: Any = None,
               options: dict[str, Any] | None = None) -> int:
        """Load the newest good checkpoint, if any; return the step it was taken at (0: none).

        A resumed run must count steps and choose its best checkpoint as the saved one did
        (:func:`~paratrain.loop.preflight.check_resumable`: with the restored training ``loader`` of the
        global order, the same global batch on any world size); the loop's state then records this
        run's batch size, accumulation, dev-set size and ``options``, for the next resume to be checked
        against; :attr:`changed` lists the options this run changed (applied from the resume step on).

        Raises:
            CheckpointError: a checkpoint in the directory cannot be resumed.
            ConfigError: another global batch (or batch size and accumulation), dev set, metric or seed
                than the saved run's.
        """
        # How the run continues on another split of its global batch or number of ranks ("…, the same
        # trajectory") is said only once the resume is accepted: a refused one says its refusal alone.
        with warnings.catch_warnings(record=True) as continuing:
            warnings.simplefilter("always")  # recorded here; said below under the caller's filters
            state = self._checkpointer.resume()
        held_back = [w for w in continuing if issubclass(w.category, (WorldChangeWarning, ElasticResumeWarning))]
        for w in continuing:  # anything else (a damaged checkpoint set aside) is said now, as it happened
            if w not in held_back:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        step = 0 if state is None else int(self._trainer_state.step)
        saved = self._trainer_state
        if step:
            check_resumable(saved, batch_size, grad_accum, dev_samples, self.directory.parent, loader, options)
            for w in held_back:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            self.resumed_metrics = dict(state.metrics or {})
            self.changed = changed_options(saved.options or {}, options or {})
        saved.batch_size, saved.grad_accum, saved.dev_samples = batch_size, grad_accum, dev_samples
        saved.options = dict(options or {})
        return step

    def save(self, step: int, epoch: int, metrics: dict[str, float] | None, check: Callable[[], None] | None = None) -> Path:
        return self._checkpointer.save(step=step, epoch=epoch, metrics=metrics, check=check)

    def agreement_pending(self) -> bool:
        """Whether the last save returned before the ranks agreed on its check (a background save): what the
        check found is raised at the next save or wait. Not collective."""
        return self._checkpointer.agreement_pending

    def newest(self) -> Path | None:
        """The newest complete checkpoint (each was checked finite before it was saved). Not collective."""
        saved = self._checkpointer.checkpoints()
        return saved[-1] if saved else None

    def best_path(self) -> str | None:
        best = self._checkpointer.best_path()
        return str(best) if best else None
