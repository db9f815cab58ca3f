"""Learning-rate schedule: linear warmup, then linear decay to zero (or constant).

BERT-style fine-tuning (transformers' Trainer by default) uses exactly
this shape; it is built on torch's ``LambdaLR`` so its ``state_dict`` is torch's.
The factor is a small callable object rather than a closure: ``LambdaLR.state_dict``
saves a callable object's attributes (plain ints here), which keeps checkpoints
loadable with ``weights_only=True``.
"""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import LambdaLR


class WarmupThen:
    """LR factor at step ``s``: ``s / warmup`` while warming up, then linear to 0 at ``total`` (or 1)."""

    def __init__(self, total: int, warmup: int, decay: bool = True):
        self.total = max(int(total), 1)
        self.warmup = max(int(warmup), 0)
        self.decay = bool(decay)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)  # never exactly 0: the first step already learns
        if not self.decay:
            return 1.0
        return max(0.0, (self.total - step) / max(self.total - self.warmup, 1))


def warmup_schedule(optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float, schedule: str = "linear") -> LambdaLR:
    """A ``LambdaLR`` over ``total_steps`` optimizer steps with ``warmup_fraction`` of them warming up."""
    warmup = round(total_steps * warmup_fraction)
    return LambdaLR(optimizer, WarmupThen(total_steps, warmup, decay=(schedule == "linear")))


def stretch_to(scheduler: LambdaLR, total_steps: int, warmup_fraction: float, schedule: str = "linear",
               lr: float | None = None) -> int | None:
    """Point a restored schedule at this run's ``total_steps``, warmup, shape and peak ``lr``; return
    the old total if it changed.

    ``LambdaLR.load_state_dict`` brings back the saved run's factor (its ``total``) and peak LR, so a
    run resumed with more epochs would otherwise sit at LR 0 after the old end, and one resumed with
    another ``--lr`` would keep the old. The learning rate of the current step is recomputed from the
    new shape.
    """
    factor = scheduler.lr_lambdas[0]
    if not isinstance(factor, WarmupThen):
        return None
    new_factor = WarmupThen(total_steps, round(total_steps * warmup_fraction), decay=(schedule == "linear"))
    same_peak = lr is None or all(base == lr for base in scheduler.base_lrs)
    if vars(new_factor) == vars(factor) and same_peak:
        return None
    old_total = factor.total if factor.total != new_factor.total else None
    scheduler.lr_lambdas = [new_factor for _ in scheduler.lr_lambdas]
    if lr is not None:
        scheduler.base_lrs = [lr for _ in scheduler.base_lrs]
    step = scheduler.last_epoch
    for group, base in zip(scheduler.optimizer.param_groups, scheduler.base_lrs):
        group["lr"] = base * new_factor(step)
    scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]
    return old_total
