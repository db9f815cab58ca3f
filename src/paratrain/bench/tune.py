"""``paratrain bench --tune``: which settings train the user's task fastest here, as pure decisions.

The search space is strategy × precision × micro-batches per process (gradient
accumulation keeps the global batch) × ``torch.compile`` × gradient compression,
with only the values that can run on this machine. Trying every combination would
take hours, so the search is one factor at a time (coordinate descent), in a fixed
order, from the best configuration so far:

1. the default (what ``paratrain train`` does without options) is measured first:
   every other candidate is compared with it;
2. for each factor in :data:`FACTORS` order, every other value of that factor is
   tried on top of the best so far; the fastest of them that stays in the band
   becomes the best when it beats it by more than :data:`MARGIN` (within the
   margin the earlier, simpler configuration stays: one run on a shared machine
   cannot tell them apart);
3. a candidate running at under half the best's speed is stopped after a quarter
   of its measured steps (:func:`hopeless`): it could not win, and the budget goes to the
   next; the search stops when the factors are done or the next run would not fit
   in the budget;
4. once a candidate beats the default, the search keeps time for two more runs in
   reserve: the default and the winner run once more each, and the winner stands only if the median of its runs still
   beats the default's by :data:`MARGIN` (:func:`confirmed`): on a shared machine
   one run can be lucky.

At most ``1 + Σ (values − 1)`` runs (the plan), each a real run of paratrain's loop,
so the order and the number of runs can be told in advance and the choice explained.
A candidate is in the band when, against the default, its per-step losses agree to
the bench's parity tolerance (full precision, uncompressed gradients: the same sums
in another order) and its dev metric is not lower by more than :func:`metric_band`
(every candidate; the only test for the ones that round on purpose).

Everything here is a function of the figures it is given; ``tune_session.py`` runs the candidates.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from paratrain.bench.methods import HSDP_REPLICATE
from paratrain.bench.parity import TOLERANCE, loss_parity
from paratrain.errors import ConfigError

# The order the factors are searched in: the ones that change the most first.
FACTORS = ("strategy", "precision", "grad_accum", "compile", "grad_compression")
MARGIN = 0.03  # a candidate must be this much faster than the best to replace it
ACCUMULATIONS = (1, 2, 4)
COMPRESSIONS = ("none", "bf16", "fp16")
METRIC_FLOOR = 0.01  # the band never narrower than one point of the metric
ESTIMATE_SLACK = 1.2  # the next run is expected to take this much longer than the mean so far
HOPELESS = 0.5  # a candidate running at under this fraction of the best's speed is stopped early
HOPELESS_AFTER_STEPS = 5  # at least this many measured steps before a candidate can be called hopeless


@dataclass(frozen=True)
class Config:
    """One candidate: how many processes, how they split the work, in which precision."""

    strategy: str  # "single" runs one process; the others --nproc-per-node
    nproc: int
    precision: str = "32-true"
    grad_accum: int = 1
    compile: bool = False
    grad_compression: str = "none"

    def describe(self, global_batch: int) -> str:
        micro = micro_batch(self, global_batch)
        mesh = f" (replicate {HSDP_REPLICATE} × shard {self.nproc // HSDP_REPLICATE})" if self.strategy == "hsdp" else ""
        parts = [f"{self.strategy} × {self.nproc}{mesh}", self.precision,
                 f"batch {micro}" + (f" × {self.grad_accum} micro-batches" if self.grad_accum > 1 else "") + " per process",
                 "compiled" if self.compile else "eager"]
        if self.grad_compression != "none":
            parts.append(f"{self.grad_compression} gradients")
        return " · ".join(parts)

    @property
    def rounds_on_purpose(self) -> bool:
        """Mixed precision and compressed gradients change the numbers: loss parity is shown, not judged."""
        return self.precision != "32-true" or self.grad_compression != "none"


def strategy_options(config: Config) -> dict[str, int]:
    """The strategy's options a candidate is built with besides the factors: hsdp's mesh (one machine
    has one node, so hsdp's default mesh would be one replica: fsdp)."""
    return {"replicate": HSDP_REPLICATE} if config.strategy == "hsdp" else {}


def micro_batch(config: Config, global_batch: int) -> int:
    """Samples per process per forward pass: the process's share of the global batch over its micro-batches."""
    return global_batch // config.nproc // config.grad_accum


@dataclass(frozen=True)
class Choices:
    """The values of every factor that can run here (the default's first), and why others were left out."""

    values: dict[str, tuple]
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)

    def plan_size(self) -> int:
        """How many runs the search makes at most."""
        return 1 + sum(len(v) - 1 for v in self.values.values())


def default_config(nproc: int) -> Config:
    """What ``paratrain train`` does without options: ddp on several processes (auto), else one process."""
    return Config(strategy="ddp" if nproc > 1 else "single", nproc=nproc)


def available_choices(nproc: int, global_batch: int, precision_problems: dict[str, str | None],
                      compile_problem: str | None, strategies: tuple[str, ...] = ("ddp", "fsdp")) -> Choices:
    """The search space on this machine.

    Args:
        nproc: the processes of the multi-process strategies (``--nproc-per-node``).
        global_batch: samples per optimizer step over all processes.
        precision_problems: each mixed precision → why it cannot run here, or None when it can.
        compile_problem: why ``torch.compile`` cannot run here, or None.
        strategies: multi-process strategies installed here (deepspeed only when it imports).
    """
    left_out: dict[str, str] = {}
    strategy_values = [*strategies, "single"] if nproc > 1 else ["single"]
    if nproc == 1:
        left_out["strategy"] = "one process (--nproc-per-node 1): nothing to spread"
    elif nproc % HSDP_REPLICATE == 0 and nproc // HSDP_REPLICATE > 1:
        strategy_values.insert(len(strategies), "hsdp")  # a 2-D mesh: replicas, each sharded over several processes
    else:
        left_out["hsdp"] = (f"{nproc} processes on one machine make no 2-D mesh that shards (replicate "
                            f"{HSDP_REPLICATE} × shard ≥ 2 needs an even --nproc-per-node of 4 or more); hsdp "
                            "shards inside each node and replicates across nodes: pick it for several nodes")
    precisions = ["32-true"]
    for name, problem in precision_problems.items():
        if problem is None:
            precisions.append(name)
        else:
            left_out[name] = problem
    per_process = global_batch // nproc
    accumulations = [k for k in ACCUMULATIONS if per_process % k == 0 and per_process // k >= 1]
    compiles = [False] if compile_problem else [False, True]
    if compile_problem:
        left_out["compile"] = compile_problem
    compressions = list(COMPRESSIONS) if nproc > 1 else ["none"]
    return Choices(values={"strategy": tuple(dict.fromkeys(strategy_values)), "precision": tuple(precisions),
                           "grad_accum": tuple(accumulations), "compile": tuple(compiles),
                           "grad_compression": tuple(compressions)}, left_out=left_out)


def fits(config: Config, global_batch: int) -> bool:
    """A candidate that can run at all: its micro-batches split the global batch evenly, and
    gradient compression only where DDP sends gradients (ddp on several processes)."""
    share = global_batch // config.nproc
    if global_batch % config.nproc or share % config.grad_accum:
        return False
    if config.grad_compression != "none" and not (config.strategy == "ddp" and config.nproc > 1):
        return False
    return True


def with_value(best: Config, factor: str, value, nproc: int) -> Config:
    """``best`` with one factor changed (the processes follow the strategy; a strategy without
    DDP's gradients drops the compression)."""
    config = dataclasses.replace(best, **{factor: value})
    if factor == "strategy":
        config = dataclasses.replace(config, nproc=1 if value == "single" else nproc)
        if value != "ddp":
            config = dataclasses.replace(config, grad_compression="none")
    return config


@dataclass(frozen=True)
class Outcome:
    """What one candidate's run gave: ``samples_per_s`` None when it did not finish (``error`` says why)."""

    samples_per_s: float | None
    step_losses: tuple[float, ...] = ()
    metric: float | None = None
    seconds: float = 0.0  # the run, start to end, scoring included
    error: str = ""
    window_s: float = 0.0  # the steady state samples/s was measured over


def metric_band(metric: float, dev_samples: int) -> float:
    """How much lower a candidate's dev metric may be than the default's: two standard errors of
    a proportion measured on ``dev_samples`` (one run's luck), and at least :data:`METRIC_FLOOR`."""
    p = min(max(metric, 0.0), 1.0)
    return max(METRIC_FLOOR, 2.0 * math.sqrt(p * (1.0 - p) / max(dev_samples, 1)))


def out_of_band(config: Config, outcome: Outcome, default: Outcome, dev_samples: int) -> str | None:
    """Why ``outcome`` cannot be recommended in place of the default's, or None when it can."""
    if outcome.samples_per_s is None:
        return outcome.error or "did not finish"
    if not config.rounds_on_purpose and default.step_losses:
        parity = loss_parity(list(outcome.step_losses), list(default.step_losses))
        if not parity <= TOLERANCE:
            return f"loss differs from the default's by {parity:.1e} (parity tolerance {TOLERANCE:g}): not the same training"
    if outcome.metric is not None and default.metric is not None:
        band = metric_band(default.metric, dev_samples)
        if outcome.metric < default.metric - band:
            return f"dev metric {outcome.metric:.4f} below the default's {default.metric:.4f} by more than {band:.3f}"
    elif default.metric is not None:
        return "no dev metric"
    return None


class Search:
    """One-factor-at-a-time search (see the module docstring). Feed it with :meth:`record`;
    ask it for :meth:`next_config` until it says None."""

    def __init__(self, default: Config, choices: Choices, global_batch: int, dev_samples: int):
        self.default = default
        self.choices = choices
        self.global_batch = global_batch
        self.dev_samples = dev_samples
        self.results: dict[Config, Outcome] = {}
        self.rejected: dict[Config, str] = {}  # candidates out of the band, and why
        self.best = default
        self._factor = -1  # index into FACTORS of the factor being searched; -1: the default
        self._queue: list[Config] = [default]

    def next_config(self) -> Config | None:
        """The next candidate to run, or None when the search is done."""
        while not self._queue:
            if self._factor >= 0:
                self._settle()
            self._factor += 1
            if self._factor >= len(FACTORS):
                return None
            factor = FACTORS[self._factor]
            candidates = [with_value(self.best, factor, v, self.default.nproc) for v in self.choices.values[factor]]
            self._queue = [c for c in dict.fromkeys(candidates)
                           if c not in self.results and fits(c, self.global_batch)]
        return self._queue.pop(0)

    def record(self, config: Config, outcome: Outcome) -> None:
        self.results[config] = outcome
        if config != self.default:
            reason = out_of_band(config, outcome, self.results[self.default], self.dev_samples)
            if reason:
                self.rejected[config] = reason

    def _settle(self) -> None:
        """End of a factor: the fastest candidate in the band replaces the best when clearly faster."""
        self.best = choose(self.best, self.in_band())

    def in_band(self) -> dict[Config, float]:
        """Every measured candidate in the band, with its samples/s."""
        return {c: o.samples_per_s for c, o in self.results.items()
                if o.samples_per_s is not None and c not in self.rejected}

    def finish(self) -> Config:
        """The recommendation once the runs are over (the last factor settled)."""
        self._settle()
        self._queue = []
        self._factor = len(FACTORS)
        return self.best

    def remaining_plan(self) -> int:
        """At most how many more runs the search makes (for the ETA)."""
        later = sum(len(self.choices.values[f]) - 1 for f in FACTORS[self._factor + 1:])
        return len(self._queue) + later


def choose(best: Config, speeds: dict[Config, float]) -> Config:
    """The fastest of ``speeds``, when it is more than :data:`MARGIN` faster than ``best``; else ``best``."""
    if best not in speeds:
        return best
    fastest = max(speeds, key=speeds.get)
    return fastest if speeds[fastest] > speeds[best] * (1.0 + MARGIN) else best


def hopeless(step: int, warmup_steps: int, step_s: float | None, global_batch: int, best_samples_per_s: float | None,
             total_steps: int = 0) -> bool:
    """Whether a running candidate can be stopped: past the warm-up and a quarter of its measured
    steps (at least :data:`HOPELESS_AFTER_STEPS`), its speed so far (rank 0's seconds per step) is
    under :data:`HOPELESS` × the best's. It would not be recommended, and finishing it would spend
    the budget that later candidates need; a quarter of the run is enough not to be fooled by a
    slow moment of a shared machine."""
    if step_s is None or not step_s > 0 or best_samples_per_s is None:
        return False
    if step < warmup_steps + max(HOPELESS_AFTER_STEPS, (total_steps - warmup_steps) // 4):
        return False
    return global_batch / step_s < HOPELESS * best_samples_per_s


def confirmed(best_speeds: list[float], default_speeds: list[float]) -> bool:
    """Whether the winner's median samples/s still beats the default's by more than :data:`MARGIN`."""
    return statistics.median(best_speeds) > statistics.median(default_speeds) * (1.0 + MARGIN)


def estimate_next_s(durations: list[float]) -> float:
    """How long the next run will likely take: the mean of those so far, with some slack."""
    return ESTIMATE_SLACK * sum(durations) / len(durations) if durations else 0.0


def fits_budget(elapsed_s: float, durations: list[float], budget_s: float) -> bool:
    """Whether one more run is expected to end within the budget."""
    return elapsed_s + estimate_next_s(durations) <= budget_s


def check_budget(budget_minutes: float | None) -> float:
    """``--budget`` in seconds.

    Raises:
        ConfigError: no budget, or one that is not a positive number of minutes.
    """
    if budget_minutes is None:
        raise ConfigError("--tune needs --budget MINUTES (how long the search may run), e.g. --tune --budget 10")
    if not budget_minutes > 0 or math.isinf(budget_minutes):
        raise ConfigError(f"--budget must be a positive number of minutes, got {budget_minutes:g}")
    return budget_minutes * 60.0


def train_command(config: Config, task: str, global_batch: int, lr: float | None = None) -> str:
    """The ``paratrain train`` line that trains ``task`` with ``config`` (a built-in task)."""
    parts = ["paratrain train", task, f"--nproc-per-node {config.nproc}", f"--strategy {config.strategy}",
             f"--precision {config.precision}", f"--batch-size {micro_batch(config, global_batch)}"]
    if config.grad_accum > 1:
        parts.append(f"--grad-accum {config.grad_accum}")
    if config.compile:
        parts.append("--compile")
    if config.grad_compression != "none":
        parts.append(f"--grad-compression {config.grad_compression}")
    parts += [f"--{name} {value}" for name, value in strategy_options(config).items()]
    if lr is not None:
        parts.append(f"--lr {lr:g}")
    return " ".join(parts)


def runtime_call(config: Config) -> str:
    """The ``pt.Runtime(...)`` of an own loop (started with ``paratrain run --nproc-per-node N``)."""
    args = [f'strategy="{config.strategy}"', f'precision="{config.precision}"']
    if config.compile:
        args.append("compile=True")
    if config.grad_compression != "none":
        args.append(f'grad_compression="{config.grad_compression}"')
    args += [f"{name}={value}" for name, value in strategy_options(config).items()]
    return f"pt.Runtime({', '.join(args)})"


def fit_call(config: Config, task: str, global_batch: int) -> str:
    """The ``pt.fit(...)`` arguments (``batch_size`` is per process per micro-batch, as in FitConfig)."""
    args = [repr(task), f'strategy="{config.strategy}"', f'precision="{config.precision}"',
            f"batch_size={micro_batch(config, global_batch)}", f"grad_accum={config.grad_accum}"]
    if config.compile:
        args.append("compile=True")
    if config.grad_compression != "none":
        args.append(f'grad_compression="{config.grad_compression}"')
    args += [f"{name}={value}" for name, value in strategy_options(config).items()]
    return f"pt.fit({', '.join(args)})"
