"""``FitConfig``: every knob of the fit loop, checked once, with the task's recipe as defaults."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from paratrain.arguments import check_type, option, option_field, options_field, reject_unknown
from paratrain.diagnostics.watchdog import DEFAULT_STALL_TIMEOUT_S
from paratrain.errors import ConfigError
from paratrain.precision import precision_names
from paratrain.strategy import (
    AUTO_SEVERAL,
    AUTO_SHARDED_NODES,
    AUTO_SHARDED_ONE_NODE,
    STRATEGIES,
    Strategy,
    strategy_class,
    strategy_names,
)

SCHEDULES = ("linear", "constant")
NONFINITE_POLICIES = ("stop", "skip")  # see paratrain.loop.nonfinite


#: The longest run ``max_steps``/``epochs`` may ask for (a billion optimizer steps is years on one GPU).
MOST_STEPS = 10**9
MOST_EPOCHS = 10**6


def strategy_option_sources() -> Iterator[tuple[str, type]]:
    """``(name, Options)`` of every registered strategy: where ``FitConfig.strategy_options``
    and its ``paratrain train`` flags come from."""
    return ((name, cls.Options) for name, cls in STRATEGIES.items())


def steps_or_auto(text: str) -> int | str:
    """``--save-every``'s value: a number of steps, or ``auto``.

    Raises:
        ValueError: neither (argparse names the flag and the value).
    """
    return "auto" if str(text).strip().lower() == "auto" else int(text)


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

    # Each field is also a flag of `paratrain train` (cli/config_flags.py): its help is the field's
    # documentation, and a new option is one field here. None: the task's recipe, unless it says.
    epochs: int | None = option_field(None, "passes over the training data (default: the task's)")
    max_steps: int | None = option_field(None, "stop after this many optimizer steps instead", metavar="N")
    batch_size: int | None = option_field(None, "samples per process per step (default: the task's)")
    eval_batch_size: int | None = option_field(None, "samples per process per evaluation batch (default: the task's)")
    lr: float | None = option_field(None, "peak learning rate (default: the task's)")
    weight_decay: float | None = option_field(None, "AdamW weight decay (default: the task's)")
    warmup: float | None = option_field(None, "fraction of the steps with a linearly rising LR (default: the task's)",
                                        metavar="FRACTION")
    schedule: str = option_field("linear", "after warmup: linear (decay to 0) or constant", choices=SCHEDULES)
    grad_accum: int = option_field(1, "micro-batches per optimizer step (gradient accumulation)", metavar="N")
    clip_norm: float | None = option_field(None, "clip the gradient norm to this value (default: the task's)",
                                           metavar="NORM")
    eval_every: int | None = option_field(None, "evaluate (and checkpoint) every N steps, besides every epoch end",
                                          metavar="N")
    eval_per_epoch: bool = option_field(True, "evaluate at the end of every epoch")
    metric: str | None = option_field(None, "dev metric that picks the best checkpoint (default: the task's: "
                                      "accuracy; seg: miou)")
    patience: int | None = option_field(None, "stop after N evaluations without a new best", metavar="N")
    out_dir: str | None = option_field(None, "output directory: checkpoints, logs, metrics (default runs/TASK)",
                                       metavar="DIR")
    save_every: int | str | None = option_field(
        None, "also checkpoint every N steps; auto: the Young/Daly interval √(2 · save cost · MTBF) from the measured "
        "save cost, re-estimated at every save", metavar="N|auto", flag_type=steps_or_auto)
    mtbf: float | None = option_field(None, "with --save-every auto: the mean time between failures in seconds "
                                      "(default: from this run directory's earlier attempts, else 3600)", metavar="SECONDS")
    background_save: bool = option_field(True, "after the first save, block training only while the state is copied "
                                         "to host memory; write, checksum, commit and prune in a thread")
    save_every_minutes: float | None = option_field(
        None, "also checkpoint when M minutes passed since the last save (bounds what a crash loses)", metavar="M")
    stall_timeout: float | None = option_field(
        DEFAULT_STALL_TIMEOUT_S, "end the job naming the stalled rank after S seconds without progress (0: off)",
        metavar="S", off=0)
    keep_last: int = option_field(2, "checkpoints to keep besides the best", metavar="N")
    on_nonfinite: str = option_field(  # loop/nonfinite.py
        "stop", "a NaN/inf loss, gradient norm or weights: stop (name the step and the last good checkpoint, "
        "exit 1) or skip (drop that step's update)", choices=NONFINITE_POLICIES)
    max_nonfinite_skips: int = option_field(10, "with --on-nonfinite skip: stop after this many skipped steps",
                                            metavar="N")
    log_every: int = option_field(50, "steps between log lines and metric records", metavar="N")
    # The default costs well under 0.5 % of the step time (benchmarks/check_sync_cost.py).
    check_sync_every: int = option_field(100, "check every N steps that all processes hold the same weights (0: never)",
                                         metavar="N")
    # pt.fit also takes a registered strategy's object (pt.DDP(...)): kept as its name and options
    strategy: str | Strategy = option_field(
        "auto", lambda: f"{strategy_names()} (auto: {AUTO_SEVERAL} on several processes; given an option of "
        f"{AUTO_SHARDED_ONE_NODE}'s, {AUTO_SHARDED_ONE_NODE} on one node and {AUTO_SHARDED_NODES} on several)",
        metavar="NAME",
        flag_type=str)
    precision: str = option_field("32-true", precision_names, metavar="NAME")
    # pt.fit(model) builds the model before the fit starts: seed before building it.
    seed: int = option_field(42, "seed of every generator when the fit starts: a task's model init, the data order, "
                             "dropout")
    sync_batchnorm: bool = option_field(False, "convert BatchNorm to SyncBatchNorm (statistics over all processes)")
    # Fast defaults (docs/performance.md): fused optimizer kernel, TF32 on CUDA, torch.compile.
    fused_optimizer: bool = option_field(True, "torch's fused optimizer kernel instead of its default one")
    tf32: bool = option_field(True, "on CUDA, float32 matmuls on TF32 tensor cores (off: full float32)")
    # Off by default: compiling costs seconds per process, and pays off on GPU.
    compile: bool = option_field(False, "torch.compile the model (seconds per process to compile; the fast path on GPU)")
    # The strategy's own options by name (find_unused_parameters, zero_stage, …): each strategy
    # declares them (its Options), and each one with a help is a flag, named after the option.
    strategy_options: Mapping[str, Any] = options_field(strategy_option_sources)
    num_workers: int = option_field(0, "data loader worker processes per process", metavar="N")
    # Batches of similar-length samples when the task gives lengths (text): far less padding.
    group_by_length: bool = option_field(True, "text tasks: batches of similar-length samples (less padding, the same "
                                         "samples per epoch); off: drawn at random")
    fresh: bool = option_field(False, "move an existing --out run aside (nothing is deleted) and start from step 0")
    progress: bool | None = option_field(None, "a progress bar (default: when stderr is a terminal)")
    tensorboard: bool | None = option_field(None, "write TensorBoard files (default: when the tensorboard package "
                                            "is installed)")
    log_with: str | None = option_field(  # paratrain.trackers: one file per tracker
        None, "experiment trackers besides TensorBoard, comma-separated: csv, mlflow, wandb (rank 0 logs the config, "
        "metrics, summary and final weights; a resumed run continues the same tracker run)", metavar="NAMES")

    def __post_init__(self) -> None:
        positive = ("epochs", "max_steps", "batch_size", "eval_batch_size", "grad_accum", "eval_every",
                    "patience", "save_every", "keep_last", "log_every")
        for name in positive:
            value = getattr(self, name)
            if name == "save_every" and value == "auto":
                continue
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{option(name)} must be a positive integer, got {value!r}")
        for name, most in (("max_steps", MOST_STEPS), ("epochs", MOST_EPOCHS)):
            value = getattr(self, name)
            if value is not None and value > most:
                # The LR schedule spans the whole run: warmup and decay stretched over 10^12 steps leave
                # the learning rate near 0 for every step a machine will ever take (seen: lr 1.8e-24).
                raise ConfigError(f"{option(name, value)} is more than {most:,} {name.replace('max_', '')}: the LR "
                                  "schedule (its warmup and decay) spans the whole run, so the learning rate would "
                                  "stay near 0 for every step actually trained; give the length you mean to train")
        for name in ("lr", "weight_decay", "clip_norm"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                                      or value < 0 or (name != "weight_decay" and value == 0)):
                kind = "a number >= 0 (finite)" if name == "weight_decay" else "a positive number (finite)"
                raise ConfigError(f"{option(name)} must be {kind}, got {value!r}")
        for field in dataclasses.fields(self):  # schedule, on_nonfinite: the choices their flags show
            choices = field.metadata.get("choices")
            if choices is not None and getattr(self, field.name) not in choices:
                raise ConfigError(f"{option(field.name, getattr(self, field.name))} is not one of {', '.join(choices)}")
        check_type("", "max_nonfinite_skips", self.max_nonfinite_skips, "int >= 0")
        for name in ("save_every_minutes", "stall_timeout", "mtbf"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0 <= value < math.inf or (name in ("save_every_minutes", "mtbf") and value == 0)):
                # inf and nan refused, as `paratrain run --stall-timeout` refuses them: "never" is 0 (off)
                what = ("a finite number of seconds, or 0 to turn the watchdog off" if name == "stall_timeout"
                        else "a positive number of seconds (finite)" if name == "mtbf"
                        else "a positive number of minutes (finite)")
                raise ConfigError(f"{option(name)} must be {what}, got {value!r}")
        # An option that only shapes another one is refused while that one is off: taken silently, it
        # would leave the user believing it set something.
        if self.mtbf is not None and self.save_every != "auto":
            raise ConfigError(f"{option('mtbf')} sets the interval of {option('save_every', 'auto')} only; add "
                              f"{option('save_every', 'auto')} or drop {option('mtbf')}")
        skips = next(f for f in dataclasses.fields(self) if f.name == "max_nonfinite_skips").default
        if self.on_nonfinite == "stop" and self.max_nonfinite_skips != skips:
            raise ConfigError(f"{option('max_nonfinite_skips', self.max_nonfinite_skips)} counts skipped steps, and "
                              f"{option('on_nonfinite', 'stop')} skips none; add {option('on_nonfinite', 'skip')} or "
                              f"drop {option('max_nonfinite_skips')}")
        if self.patience is not None and not self.eval_per_epoch and self.eval_every is None:
            raise ConfigError(f"{option('patience')} counts evaluations, and {option('eval_per_epoch', False)} without "
                              f"{option('eval_every')} schedules none; add {option('eval_every', 'N')} or drop "
                              f"{option('patience')}")
        if self.warmup is not None and not 0 <= self.warmup < 1:
            raise ConfigError(f"{option('warmup')} is a fraction of the steps in [0, 1), got {self.warmup!r}")
        check_type("", "num_workers", self.num_workers, "int >= 0")
        check_type("", "check_sync_every", self.check_sync_every, "int >= 0")
        check_type("", "seed", self.seed, "int")
        for name in ("eval_per_epoch", "sync_batchnorm", "fresh", "background_save", "group_by_length", "fused_optimizer", "tf32", "compile"):
            check_type("", name, getattr(self, name), "bool")
        for name in ("progress", "tensorboard"):
            check_type("", name, getattr(self, name), "bool", allow_none=True)
        if self.log_with is not None:  # a list from pt.fit(log_with=[...]) is kept as the flag's words
            from paratrain.trackers import parse_names

            object.__setattr__(self, "log_with", ",".join(parse_names(self.log_with, option("log_with"))))
        for name in ("precision", "schedule"):
            check_type("", name, getattr(self, name), "str")
        if not isinstance(self.strategy_options, Mapping):
            raise ConfigError(f"strategy_options must be a mapping of option names to values, got {self.strategy_options!r}")
        if isinstance(self.strategy, Strategy):
            self._strategy_as_words()
        check_type("", "strategy", self.strategy, "str")
        reject_unknown("", self.strategy_options, strategy_option_names())
        for name in ("metric", "out_dir"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise ConfigError(f"{option(name)} must be a str, got {type(value).__name__}")

    def _strategy_as_words(self) -> None:
        """A strategy object becomes its registered name and its options: the config stays plain data
        (logged, compared between ranks, handed to workers as flags).

        Raises:
            ConfigError: options given beside the object, or the object's class is not registered.
        """
        strategy = self.strategy
        if self.strategy_options:
            raise ConfigError(f"give the options to the strategy object ({type(strategy).__name__}(...)), not "
                              f"beside it: {', '.join(sorted(self.strategy_options))}")
        if strategy_class(strategy.name) is not type(strategy):
            raise ConfigError(f"{type(strategy).__name__} is not registered under its name {strategy.name!r}: "
                              "decorate it with @pt.register_strategy to fit with it")
        object.__setattr__(self, "strategy", strategy.name)
        object.__setattr__(self, "strategy_options", dict(strategy.given_options))

    def strategy_arguments(self) -> dict[str, Any]:
        """``strategy=`` and the strategy's options for ``pt.Runtime``: what was given, and what the
        strategy needs to know of the loop (a strategy whose engine clips takes ``clip_norm`` when
        it is built: :meth:`~paratrain.strategy.Strategy.fit_options`)."""
        cls = strategy_class(self.strategy)
        options = dict(self.strategy_options)
        return {"strategy": self.strategy, **(cls.fit_options(options, self.clip_norm) if cls else options)}

    def with_recipe(self, recipe: Any) -> FitConfig:
        """This config with every ``None`` that the recipe knows filled from it."""
        filled = {
            field.name: getattr(recipe, field.name)
            for field in dataclasses.fields(recipe)
            if hasattr(self, field.name) and getattr(self, field.name) is None
        }
        return dataclasses.replace(self, **filled)

    @property
    def trackers(self) -> tuple[str, ...]:
        """The tracker names of ``log_with``."""
        from paratrain.trackers import parse_names

        return parse_names(self.log_with)

    def replace(self, **changes: Any) -> FitConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def check_names(cls, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` when every key is a field or a registered strategy's option.

        Raises:
            ConfigError: an unknown option (names the closest known one).
        """
        reject_unknown("pt.fit()", options, [*(field.name for field in dataclasses.fields(cls)),
                                             *strategy_option_names()])
        return options

    def with_options(self, **options: Any) -> FitConfig:
        """This config with ``options`` (``pt.fit``'s keywords): fields replaced, and a registered
        strategy's options (``find_unused_parameters=True``) added to ``strategy_options``.

        Raises:
            ConfigError: an unknown option (names the closest known one), or a bad value.
        """
        fields = [field.name for field in dataclasses.fields(self)]
        self.check_names(options)
        changes = {name: value for name, value in options.items() if name in fields}
        given = {name: value for name, value in options.items() if name not in fields}
        if given:
            changes["strategy_options"] = {**changes.get("strategy_options", self.strategy_options), **given}
        return dataclasses.replace(self, **changes)


def strategy_option_names() -> list[str]:
    """Every registered strategy's option names."""
    return list(dict.fromkeys(field.name for _, options in strategy_option_sources()
                              for field in dataclasses.fields(options)))
