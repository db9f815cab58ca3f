"""Non-finite training noticed on every rank together, before anything is saved.

A NaN or inf loss (or gradient norm, where clipping computes one) poisons the weights at
the next optimizer step, and every checkpoint after it: a run that keeps going saves NaN
weights as "best" and exits 0. The guard has two policies:

* ``stop`` (the default): each step folds "is this finite?" into small tensors on the
  loss's device (no host sync per step). At every log line and before every save the
  ranks agree, in one all-reduce, on the first bad step and on whether the weights are
  still finite; then the run stops with :class:`~paratrain.errors.NonFiniteError`, naming
  the step and the last good checkpoint. Nothing after the bad step is ever saved.
* ``skip``: before each optimizer step the ranks agree (one all-reduce per step) whether
  any rank's loss or local gradients are non-finite; such a step drops its gradients
  (the optimizer does not move, the step still counts), at most ``max_skips`` times in a
  run; one more is a stop as above.

Under fp16 mixed precision the loss scaler already skips a step whose gradients
overflowed and lowers the scale: those steps are not failures, so only the weights are
checked there.

:class:`NonFiniteGuard` knows *whether* a loss, a gradient or a weight went NaN or inf;
:class:`FiniteChecks` asks it at the loop's points — before every optimizer step under
``--on-nonfinite skip``, before every log line with a loss, every evaluation and every save —
and turns a bad answer into a console line, a run-log record and, when the run must stop, a
:class:`~paratrain.errors.NonFiniteError` that names the last good checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from paratrain import comm
from paratrain.diagnostics import watchdog
from paratrain.errors import NonFiniteError
from paratrain.loop.run_log import RunLog
from paratrain.loop.state import FitState

NEVER = 2**62  # "no bad step seen" in a min-reduction


@dataclass(frozen=True)
class Verdict:
    """What the ranks agreed on: the first step whose loss / gradient norm was not finite,
    and the step at which the weights were found not finite (``None``: all fine)."""

    loss_step: int | None = None
    norm_step: int | None = None
    weights_step: int | None = None

    @property
    def bad(self) -> bool:
        return any(step is not None for step in (self.loss_step, self.norm_step, self.weights_step))

    def describe(self) -> str:
        if self.loss_step is not None:
            return f"the training loss was not finite (NaN or inf) at step {self.loss_step}"
        if self.norm_step is not None:
            return f"the gradient norm was not finite (NaN or inf) at step {self.norm_step}"
        return f"the weights were not finite (NaN or inf) at step {self.weights_step}"

    @property
    def first_step(self) -> int:
        return min(step for step in (self.loss_step, self.norm_step, self.weights_step) if step is not None)


def local_weights_finite(parameters: Iterable[torch.Tensor]) -> torch.Tensor:
    """A 0-dim bool tensor: every element of this rank's share of ``parameters`` is finite.

    Sharded parameters (DTensor) are checked on their local shard, so nothing here
    communicates; the caller all-reduces.

    Each floating tensor is reduced to its smallest and largest element (``torch.aminmax``, one
    vectorised pass with no temporary tensor): NaN propagates into both ("NaN values are propagated
    to the output if at least one value is NaN", torch's documentation) and an infinity is an
    extreme, so both extremes are finite exactly when every element is. On CPU this is about ten
    times cheaper than ``isfinite(t).all()``, which builds a bool tensor per parameter: for
    text-cls's 1 M weights 0.2 ms instead of 2.3 ms per check, paid before every save and log line.
    Integer tensors are always finite; other dtypes (complex, float8) take ``isfinite`` as before.
    """
    extremes: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}  # stacked per device and dtype
    checks: list[torch.Tensor] = []
    for parameter in parameters:
        # a DTensor's own shard, read directly: to_local() goes through autograd (~30 µs a call: 1–2 ms of an fsdp
        # text-cls save's 3 ms check)
        local = getattr(parameter, "_local_tensor", None)
        if local is None:
            local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
        local = local.detach()
        if not local.numel() or not (local.is_floating_point() or local.is_complex()):
            continue
        if local.dtype in _EXTREMES_DTYPES:
            extremes.setdefault((local.device, local.dtype), []).extend(torch.aminmax(local))
        else:
            checks.append(torch.isfinite(local).all())
    checks += [torch.isfinite(torch.stack(values)).all() for values in extremes.values()]
    if not checks:
        return torch.ones((), dtype=torch.bool)
    return torch.stack([c.to(checks[0].device) for c in checks]).all()


#: dtypes whose finiteness :func:`local_weights_finite` reads from the extremes
_EXTREMES_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class NonFiniteGuard:
    """The fit loop's watch over non-finite losses, gradient norms and weights.

    ``observe`` is local (no communication); ``agree`` and ``should_skip`` are collective.
    """

    def __init__(self, policy: str = "stop", max_skips: int = 10, scaler_skips: bool = False):
        self.policy = policy
        self.max_skips = max_skips
        #: fp16: the loss scaler skips overflowed steps itself; only the weights are checked.
        self.scaler_skips = scaler_skips
        self.skipped = 0
        self._loss_first: torch.Tensor | None = None
        self._norm_first: torch.Tensor | None = None

    @property
    def out_of_skips(self) -> bool:
        return self.skipped > self.max_skips

    @property
    def skips_batches(self) -> bool:
        return self.policy == "skip" and not self.scaler_skips

    def observe(self, step: int, losses: list[torch.Tensor], norm: torch.Tensor | None) -> None:
        """Fold step ``step``'s micro-batch losses and gradient norm into the first-bad-step record. Not collective."""
        if self.scaler_skips or not losses:
            return
        loss_bad = torch.stack([(~torch.isfinite(loss.detach().float())) for loss in losses]).any()
        self._loss_first = _first(self._loss_first, loss_bad, step)
        if norm is not None and isinstance(norm, torch.Tensor):
            self._norm_first = _first(self._norm_first, ~torch.isfinite(norm.detach().float()), step)

    def agree(self, step: int, parameters: Iterable[torch.Tensor]) -> Verdict:
        """Every rank's record and weights, reduced: the same :class:`Verdict` on every rank. Collective."""
        weights_ok = local_weights_finite(parameters).cpu()
        record = torch.tensor(
            [_seen(self._loss_first), _seen(self._norm_first), NEVER if bool(weights_ok) else step], dtype=torch.int64
        )
        reduced = comm.all_reduce(record, op="min").tolist()
        return Verdict(*[None if value >= NEVER else int(value) for value in reduced])

    def locally_finite(self, parameters: Iterable[torch.Tensor]) -> bool:
        """This rank's record and weights show nothing non-finite (what :meth:`agree` reduces). Not collective."""
        return (_seen(self._loss_first) >= NEVER and _seen(self._norm_first) >= NEVER
                and bool(local_weights_finite(parameters)))

    def should_skip(self, losses: list[torch.Tensor], optimizer: torch.optim.Optimizer) -> bool:
        """Skip policy, before the optimizer step: True on every rank when any rank's loss or
        local gradients are not finite. Collective (one all-reduce per step).

        Raises:
            NonFiniteError: more than ``max_skips`` steps skipped in this run.
        """
        local_bad = any(not math.isfinite(float(loss.detach())) for loss in losses)
        if not local_bad:
            grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            local_bad = not bool(local_weights_finite(grads))
        bad = bool(comm.all_reduce(float(local_bad), op="max"))
        if bad:
            self.skipped += 1
        return bad

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped = int(state.get("skipped", 0))


def _first(current: torch.Tensor | None, bad: torch.Tensor, step: int) -> torch.Tensor:
    """The first bad step so far (-1: none), kept on the device of ``bad``."""
    if current is None:
        current = torch.full((), -1, dtype=torch.int64, device=bad.device)
    return torch.where(bad & (current < 0), torch.full_like(current, step), current)


def _seen(first: torch.Tensor | None) -> int:
    value = -1 if first is None else int(first)
    return NEVER if value < 0 else value


def stop_message(verdict: Verdict, last_good: str | None, skipped: int = 0) -> str:
    """The one line a non-finite run stops with."""
    where = (f"the last good checkpoint is {last_good} (nothing after step {verdict.first_step - 1} was saved)"
             if last_good else "no checkpoint was saved before it")
    skips = f" after {skipped} skipped step(s)" if skipped else ""
    return (f"stopped: {verdict.describe()}{skips}; {where}; lower the learning rate (or clip gradients with "
            "--clip-norm) and run again, or pass --on-nonfinite skip to skip such batches")


__all__ = ["NEVER", "NonFiniteError", "NonFiniteGuard", "Verdict", "local_weights_finite", "stop_message"]


class FiniteChecks:
    """Where the fit loop asks ``guard`` whether training is still finite.

    Args:
        guard: the run's guard (its policy, its count of skipped steps).
        last_good: the newest checkpoint's path, or None; asked only when the run stops.
    """

    def __init__(self, guard: NonFiniteGuard, last_good: Callable[[], str | None]):
        self.guard = guard
        self._last_good = last_good
        self._finite_at = -1  # the last step the ranks agreed that training is finite

    def skip_step(self, state: FitState, losses: list[torch.Tensor], optimizer: Any, log: RunLog) -> bool:
        """``--on-nonfinite skip``: drop this step's gradients when any rank's loss or gradients are
        not finite (the step still counts). Collective when skipping is on.

        Raises:
            NonFiniteError: more skipped steps than ``max_nonfinite_skips``.
        """
        guard = self.guard
        if not guard.skips_batches or not guard.should_skip(losses, optimizer):
            return False
        optimizer.zero_grad(set_to_none=True)
        state.nonfinite_skips = guard.skipped
        step = state.step + 1
        log.console(f"step {step}: skipped (non-finite loss or gradients; {guard.skipped} of at most "
                    f"{guard.max_skips} skips)")
        log.record("nonfinite_skip", step, skipped=guard.skipped)
        if guard.out_of_skips:
            last_good = self._last_good()
            saved = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint was saved"
            raise NonFiniteError(
                f"stopped: more than {guard.max_skips} steps had non-finite losses or gradients (the last at step {step}); "
                f"{saved}; lower the learning rate, or raise --max-nonfinite-skips"
            )
        return True

    def check(self, step: int, model: torch.nn.Module, log: RunLog) -> None:
        """The ranks agree that losses, gradient norms and weights are finite up to ``step``. Collective
        (once per step: asked again at the same step, it answers from the last agreement).

        Called before every log line with a loss, every evaluation and every save, so nothing
        non-finite is ever reported as a result or written as a checkpoint.

        Raises:
            NonFiniteError: on every rank, naming the first bad step and the last good checkpoint.
        """
        if self._finite_at == step:
            return
        watchdog.mark("collective")
        verdict = self.guard.agree(step, model.parameters())
        if verdict.bad:
            log.record("nonfinite", verdict.first_step, what=verdict.describe())
            raise NonFiniteError(stop_message(verdict, self._last_good(), self.guard.skipped))
        self._finite_at = step

    def before_save(self, step: int, model: torch.nn.Module) -> Callable[[], None] | None:
        """A check for a save's own agreement between the ranks (None when the ranks agreed at ``step``
        already): it raises on a rank that saw anything non-finite, so the save fails on every rank with
        nothing written; :meth:`saved` or :meth:`after_failed_save` follows. Not collective."""
        if self._finite_at == step:
            return None

        def check() -> None:
            if not self.guard.locally_finite(model.parameters()):
                raise NonFiniteError(f"non-finite training on this rank by step {step}")

        return check

    def saved(self, step: int) -> None:
        """A save with :meth:`before_save`'s check succeeded: every rank found training finite at ``step``."""
        self._finite_at = step

    def after_failed_save(self, step: int, model: torch.nn.Module, log: RunLog) -> None:
        """After a save failed on every rank: :meth:`check` names a non-finite run as it would have before the
        save (the save's failure is raised when training is finite). Collective."""
        self.check(step, model, log)
