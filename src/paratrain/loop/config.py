"""``FitConfig``: every knob of the fit loop, checked once, with the task's recipe as defaults."""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

from paratrain.arguments import check_type, option, reject_unknown
from paratrain.diagnostics.watchdog import DEFAULT_STALL_TIMEOUT_S
from paratrain.errors import ConfigError

SCHEDULES = ("linear", "constant")
NONFINITE_POLICIES = ("stop", "skip")  # see paratrain.loop.nonfinite


@dataclass(frozen=True)
class FitConfig:
    """How to train. ``None`` means "the task's recipe" (see :class:`paratrain.tasks.Recipe`).

    Length: ``epochs`` passes over the training data, or ``max_steps`` optimizer
    steps when given (then epochs only bound nothing). A *step* is one optimizer
    step on one global batch of ``world_size × batch_size × grad_accum`` samples, fixed
    when the run starts: resumed on another number of processes, the run keeps it (and
    re-splits it, see :mod:`paratrain.data.global_order`), so it trains the same model.

    Evaluation runs on the dev set with exact sharding (every sample once) every
    ``eval_every`` steps and/or at the end of every epoch (``eval_per_epoch``);
    each evaluation saves a checkpoint, and the best one by ``metric`` is kept
    (higher is better; lower for a metric named ``loss``). ``patience`` stops after that many evaluations without a new best.
    """

    epochs: int | None = None
    max_steps: int | None = None
    batch_size: int | None = None  # per rank
    eval_batch_size: int | None = None  # per rank
    lr: float | None = None
    weight_decay: float | None = None
    warmup: float | None = None  # fraction of all steps with a linearly rising LR
    schedule: str = "linear"  # after warmup: "linear" decay to 0, or "constant"
    grad_accum: int = 1
    clip_norm: float | None = None
    eval_every: int | None = None  # steps; None: only at epoch ends
    eval_per_epoch: bool = True
    metric: str | None = None
    patience: int | None = None
    out_dir: str | None = None  # None: no checkpoints, logs or metrics files
    save_every: int | None = None  # steps, besides the saves at evaluations and epoch ends
    save_every_minutes: float | None = None  # also save when this much time passed since the last save
    stall_timeout: float | None = DEFAULT_STALL_TIMEOUT_S  # seconds without progress on a rank → named error; 0/None: off
    keep_last: int = 2
    # A NaN/inf loss, gradient norm or weights: "stop" (name the step and the last good checkpoint)
    # or "skip" the step's update, at most max_nonfinite_skips times (loop/nonfinite.py).
    on_nonfinite: str = "stop"
    max_nonfinite_skips: int = 10
    log_every: int = 50  # steps between console lines / metric records
    # Steps between checks that all ranks hold the same weights (0: never). The default costs
    # well under 0.5 % of the step time (benchmarks/check_sync_cost.py).
    check_sync_every: int = 100
    strategy: str = "auto"
    precision: str = "32-true"
    seed: int = 42  # every generator when fit starts: data order, dropout; a task's model (pt.fit(model): seed before building it)
    sync_batchnorm: bool = False
    # Fast defaults (README "Fast defaults"): fused optimizer kernel, TF32 on CUDA, torch.compile.
    fused_optimizer: bool = True
    tf32: bool = True
    compile: bool = False  # on by choice: compiling costs seconds per process, and pays off on GPU
    zero_stage: int | None = None  # strategy "deepspeed": ZeRO stage 1, 2 or 3 (its default: 2)
    grad_compression: str | None = None  # strategy "ddp": none | bf16 | fp16 | powersgd[:RANK] | auto
    find_unused_parameters: bool = False  # strategy "ddp" (or auto on several processes): parameters without a gradient
    num_workers: int = 0
    # Batches of similar-length samples when the task gives lengths (text): far less padding.
    group_by_length: bool = True
    fresh: bool = False  # move an existing out_dir aside instead of resuming from it
    progress: bool | None = None  # None: a bar when stderr is a terminal
    tensorboard: bool | None = None  # None: when the tensorboard package is installed

    def __post_init__(self) -> None:
        positive = ("epochs", "max_steps", "batch_size", "eval_batch_size", "grad_accum", "eval_every",
                    "patience", "save_every", "keep_last", "log_every")
        for name in positive:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{option(name)} must be a positive integer, got {value!r}")
        for name in ("lr", "weight_decay", "clip_norm"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                                      or value < 0 or (name != "weight_decay" and value == 0)):
                kind = "a number >= 0 (finite)" if name == "weight_decay" else "a positive number (finite)"
                raise ConfigError(f"{option(name)} must be {kind}, got {value!r}")
        if self.on_nonfinite not in NONFINITE_POLICIES:
            raise ConfigError(f"{option('on_nonfinite', self.on_nonfinite)} is not one of {', '.join(NONFINITE_POLICIES)}")
        check_type("", "max_nonfinite_skips", self.max_nonfinite_skips, "int >= 0")
        for name in ("save_every_minutes", "stall_timeout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
                                      or (name == "save_every_minutes" and value == 0)):
                raise ConfigError(f"{option(name)} must be a positive number, got {value!r}")
        if self.warmup is not None and not 0 <= self.warmup < 1:
            raise ConfigError(f"{option('warmup')} is a fraction of the steps in [0, 1), got {self.warmup!r}")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"{option('schedule', self.schedule)} is not one of {', '.join(SCHEDULES)}")
        check_type("", "num_workers", self.num_workers, "int >= 0")
        check_type("", "check_sync_every", self.check_sync_every, "int >= 0")
        check_type("", "seed", self.seed, "int")
        for name in ("eval_per_epoch", "sync_batchnorm", "fresh", "group_by_length", "fused_optimizer", "tf32", "compile",
                     "find_unused_parameters"):
            check_type("", name, getattr(self, name), "bool")
        for name in ("progress", "tensorboard"):
            check_type("", name, getattr(self, name), "bool", allow_none=True)
        for name in ("strategy", "precision", "schedule"):
            check_type("", name, getattr(self, name), "str")
        for name in ("metric", "out_dir"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ConfigError(f"{option(name)} must be a str, got {type(value).__name__}")

    def strategy_options(self) -> dict[str, Any]:
        """Options for ``Runtime(strategy=...)`` that this config implies.

        A strategy that clips inside its own engine (it takes ``gradient_clipping``) gets
        ``clip_norm`` at construction; ``zero_stage`` goes to the strategy as given (one that
        does not take it refuses with a ConfigError).
        """
        from paratrain.strategy import STRATEGIES

        options: dict[str, Any] = {}
        if self.zero_stage is not None:
            options["zero_stage"] = self.zero_stage
        if self.grad_compression is not None:
            options["grad_compression"] = self.grad_compression
        if self.find_unused_parameters:
            options["find_unused_parameters"] = True
        strategy = STRATEGIES.get(self.strategy)
        if self.clip_norm is not None and strategy is not None and "gradient_clipping" in strategy.option_names:
            options["gradient_clipping"] = self.clip_norm
        return options

    def with_recipe(self, recipe: Any) -> FitConfig:
        """This config with every ``None`` that the recipe knows filled from it."""
        filled = {
            field.name: getattr(recipe, field.name)
            for field in dataclasses.fields(recipe)
            if hasattr(self, field.name) and getattr(self, field.name) is None
        }
        return dataclasses.replace(self, **filled)

    def replace(self, **changes: Any) -> FitConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def check_names(cls, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` when every key is a field.

        Raises:
            ConfigError: an unknown option (names the closest known one).
        """
        reject_unknown("pt.fit()", options, [field.name for field in dataclasses.fields(cls)])
        return options
