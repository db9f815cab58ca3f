"""``FitState``: the loop's own progress, saved in every checkpoint beside the model and data state."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from paratrain.checkpoint.catalog import is_better


@dataclass
class FitState:
    """Where the fit loop is, and what it found so far. Plain numbers only (safe to load)."""

    step: int = 0  # optimizer steps done
    samples: int = 0  # training samples seen, all ranks together
    best_value: float | None = None  # best value of the chosen metric
    best_step: int = -1
    best_metrics: dict[str, float] = field(default_factory=dict)
    evals_without_improvement: int = 0
    stopped_early: bool = False
    nonfinite_skips: int = 0  # steps skipped for non-finite losses/gradients (--on-nonfinite skip)
    # What a step and the best metric meant when saved (0: not recorded); see loop/preflight.py.
    batch_size: int = 0
    grad_accum: int = 0
    dev_samples: int = 0
    #: The fit options a resume compares with its own (loop/preflight.py ``RESUME_OPTIONS``); {}: not recorded.
    options: dict[str, Any] = field(default_factory=dict)

    def improve(self, value: float, step: int, metrics: dict[str, float], higher_is_better: bool = True) -> bool:
        """Record an evaluation; True when ``value`` is a new best by :func:`~paratrain.checkpoint.catalog.is_better`
        (the rule the checkpoint catalog keeps and exports the best by: a tie keeps the earlier, NaN never wins)."""
        if is_better(value, self.best_value, "max" if higher_is_better else "min"):
            self.best_value, self.best_step, self.best_metrics = value, step, dict(metrics)
            self.evals_without_improvement = 0
            return True
        self.evals_without_improvement += 1
        return False

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if hasattr(self, key):
                setattr(self, key, dict(value) if isinstance(value, dict) else value)
