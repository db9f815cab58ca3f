"""``paratrain bench --tune``: run the search of ``tune.py`` for real within a time budget.

Every candidate is one run of the bench's ``paratrain_loop.py`` (paratrain's public
API: ``pt.Runtime``, ``rt.setup``, ``rt.loader``, ``rt.accumulate``) on the bench's
workload (the same initial weights, samples, order and global batch as every bench
method), started as the bench starts ``single`` or ``ddp``: ``python`` for one
process, ``paratrain run`` for several. Its steady-state samples/s and per-step
losses come from the bench's records, its dev metric from the bench's scorer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

import torch

from paratrain.tasks import task_ref
from paratrain.bench.evaluate import evaluate_weights
from paratrain.bench.figures import compute_figures, read_records
from paratrain.bench.methods import Method
from paratrain.bench.record import FINAL_WEIGHTS, save_weights
from paratrain.bench.round_plan import check_rounds, steps_for_min_time
from paratrain.bench.runner import ProgressLine, run_tree
from paratrain.bench.session import Bench
from paratrain.bench.settings import method_env
from paratrain.bench.spec import BenchSpec
from paratrain.bench.tune import (HOPELESS, Choices, Config, Outcome, Search, available_choices, choose, confirmed, default_config,
                                  estimate_next_s, fit_call, fits_budget, hopeless, runtime_call, strategy_options,
                                  train_command)
from paratrain.errors import ConfigError, ParatrainError

TUNE_FILE = "tune.json"


def precision_problems(device: torch.device) -> dict[str, str | None]:
    """Each mixed precision → why paratrain refuses it on ``device`` (its own autocast probe), or None."""
    from paratrain.precision import create_precision

    problems: dict[str, str | None] = {}
    for name in ("bf16-mixed", "fp16-mixed"):
        try:
            create_precision(name, device)
            problems[name] = None
        except ConfigError as exc:
            problems[name] = str(exc)
    return problems


def compile_problem(device: torch.device) -> str | None:
    """Why ``torch.compile`` cannot run here, or None: this Python unsupported by dynamo, or (CPU)
    no C++ compiler for inductor's generated code. A candidate that still fails is reported as failed."""
    try:
        import torch._dynamo
    except Exception as exc:  # a broken optional part of torch: say so, tune the rest
        return f"torch.compile does not import here ({type(exc).__name__})"
    if not torch._dynamo.is_dynamo_supported():
        return f"torch.compile does not support Python {sys.version_info.major}.{sys.version_info.minor} in torch {torch.__version__}"
    if device.type == "cpu" and not any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "c++", "clang++") if c):
        return "torch.compile on CPU needs a C++ compiler (g++ or clang++) and none is on the PATH"
    return None


class Hopeless(Exception):
    """A running candidate is too slow to win (raised from its progress line; run_tree kills its tree)."""


class WatchedProgress(ProgressLine):
    """The bench's progress line, which also stops a candidate that cannot win (:func:`tune.hopeless`)."""

    def __init__(self, stream: TextIO, label: str, total_steps: int, warmup_steps: int, global_batch: int,
                 best_samples_per_s: float | None):
        super().__init__(stream, label, total_steps)
        self.warmup_steps, self.global_batch, self.best = warmup_steps, global_batch, best_samples_per_s

    def update(self, step: int, elapsed: float, step_s: float | None) -> None:
        super().update(step, elapsed, step_s)
        if hopeless(step, self.warmup_steps, step_s, self.global_batch, self.best, self.total):
            raise Hopeless(f"stopped at step {step}: {self.global_batch / step_s:,.0f} samples/s so far, under "
                           f"{HOPELESS:g} × the best's {self.best:,.0f}")


def _fmt_s(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Tune:
    """The search within ``budget_s`` on the checked settings of ``bench`` (its task, global batch,
    steps, learning rate, processes, output folder). When the default's steady state is shorter
    than ``min_time_s``, every candidate takes more steps (the default runs again with them)."""

    def __init__(self, bench: Bench, budget_s: float, min_time_s: float = 3.0, stream: TextIO = sys.stderr):
        check_rounds(1, min_time_s)
        self.bench = bench
        self.min_time_s = min_time_s
        self.settings = bench.settings
        self.budget_s = budget_s
        self.stream = stream
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        self.choices: Choices = available_choices(
            self.settings.nproc, bench.global_batch, precision_problems(device), compile_problem(device))
        self.default = default_config(self.settings.nproc)
        self.search = Search(self.default, self.choices, bench.global_batch, len(bench.dev_set))
        self.durations: list[float] = []
        self.labels: dict[Config, int] = {}

    def run(self) -> Config:
        """Search, print the table and the recommendation, write ``tune.json``; return the recommendation.

        Raises:
            ConfigError: the default configuration itself did not finish (within the budget or at all).
        """
        s, b = self.settings, self.bench
        work = s.out / "tune"
        work.mkdir(parents=True, exist_ok=True)
        init_weights = work / "init.safetensors"
        torch.manual_seed(s.seed)
        save_weights(b.task.build_model().state_dict(), init_weights)
        spec = BenchSpec(task=task_ref.absolute_ref(s.task), steps=s.steps, global_batch=b.global_batch, nproc=s.nproc,
                         lr=b.lr, weight_decay=b.task.recipe.weight_decay, seed=s.seed,
                         init_weights=str(init_weights.resolve()), task_options=s.task_options.to_dict())
        self.spec = spec
        self._say(f"paratrain bench --tune: task {s.task} · {s.steps} steps × global batch {b.global_batch} per candidate · "
                  f"budget {_fmt_s(self.budget_s)} · at most {self.choices.plan_size()} candidates, one factor at a time "
                  f"from the best so far")
        for factor, reason in self.choices.left_out.items():
            self._say(f"  not tried: {factor}: {reason}")
        clock = time.monotonic()
        stopped = ""
        while (config := self.search.next_config()) is not None:
            elapsed = time.monotonic() - clock
            # Once some candidate beats the default, time for two more runs stays in reserve: the
            # default and the winner once more (_confirm).
            leading = choose(self.search.best, self.search.in_band()) if self.default in self.search.results else self.default
            reserve = 2 * estimate_next_s(self.durations) if leading != self.default else 0.0
            if config != self.default and not fits_budget(elapsed + reserve, self.durations, self.budget_s):
                kept = f", and {_fmt_s(reserve)} are kept to run the default and the winner once more" if reserve else ""
                stopped = (f"budget reached after {_fmt_s(elapsed)}: the next candidate would take about "
                           f"{_fmt_s(estimate_next_s(self.durations))}{kept}; {self.search.remaining_plan() + 1} left untried")
                break
            outcome = self._candidate(config, spec, work, clock)
            steps = steps_for_min_time(spec.steps, self.bench.warmup_steps, outcome.window_s, self.min_time_s)
            if config == self.default and outcome.samples_per_s is not None and steps > spec.steps:
                self._say(f"  {outcome.window_s:.2f}s of steady state in {spec.steps} steps, below --min-time "
                          f"{self.min_time_s:g}s: every candidate takes {steps} steps; the default again")
                spec = dataclasses.replace(spec, steps=steps)
                self.durations.clear()  # the short run says nothing about how long the others take
                outcome = self._candidate(config, spec, work, clock)
            self.search.record(config, outcome)
            self.spec = spec
            if config == self.default and outcome.samples_per_s is None:
                raise ConfigError(f"--tune: the default configuration ({config.describe(b.global_batch)}) did not finish: "
                                  f"{outcome.error}; raise --budget or --timeout, or lower --steps")
        best = self.search.finish()
        self.speeds = {c: [o.samples_per_s] for c, o in self.search.results.items() if o.samples_per_s is not None}
        if best != self.default:
            elapsed = time.monotonic() - clock
            if fits_budget(elapsed + estimate_next_s(self.durations), self.durations, self.budget_s):
                best, unconfirmed = self._confirm(best, work, clock)
                stopped = "; ".join(filter(None, [stopped, unconfirmed]))
            else:
                stopped = "; ".join(filter(None, [stopped, "no time left in the budget to run the default and the "
                                                           "winner once more: one run each"]))
        self._report(best, stopped, time.monotonic() - clock)
        self._write(best, stopped)
        return best

    def _confirm(self, best: Config, work: Path, clock: float) -> tuple[Config, str]:
        """The default and the winner once more each; the winner stands if its median still wins."""
        for config in (self.default, best):
            outcome = self._candidate(config, self.spec, work, clock, again=True)
            if outcome.samples_per_s is not None:
                self.speeds[config].append(outcome.samples_per_s)
        if confirmed(self.speeds[best], self.speeds[self.default]):
            return best, ""
        return self.default, (f"the winner ({best.describe(self.bench.global_batch)}) did not hold up on a second run: "
                              f"median {statistics.median(self.speeds[best]):,.0f} vs the default's "
                              f"{statistics.median(self.speeds[self.default]):,.0f} samples/s; the default stays")

    def _candidate(self, config: Config, spec: BenchSpec, work: Path, clock: float, again: bool = False) -> Outcome:
        index = self.labels.setdefault(config, len(self.labels) + 1)
        elapsed = time.monotonic() - clock
        left = self.budget_s - elapsed
        planned = index + self.search.remaining_plan()
        eta = min(left, estimate_next_s(self.durations) * (self.search.remaining_plan() + 1)) if self.durations else None
        if again:
            planned, eta = 2, estimate_next_s(self.durations) * (2 if config == self.default else 1)
        self._say(f"[tune {index}{' again' if again else ''}/≤{planned} · {_fmt_s(elapsed)} of {_fmt_s(self.budget_s)}"
                  + (f" · ETA ≤{_fmt_s(eta)}" if eta is not None else "") + f"] {config.describe(self.bench.global_batch)}")
        run_dir = work / f"candidate-{index}{'-again' if again else ''}"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        single = config.strategy == "single"
        method = Method(f"candidate-{index}", config.describe(self.bench.global_batch), "paratrain_loop.py",
                        "python" if single else "paratrain run", multi_process=not single,
                        options={"strategy": config.strategy, "compile": config.compile,
                                 "grad_compression": config.grad_compression, "grad_accum": config.grad_accum,
                                 **strategy_options(config)})
        spec_file = spec.for_method(method.name, config.precision, method.options, run_dir).save(run_dir)
        timeout = min(self.settings.timeout_s, max(left, 1.0))
        best = self.search.in_band().get(self.search.best) if not again else None
        progress = WatchedProgress(self.stream, f"  candidate {index}", spec.steps, self.bench.warmup_steps,
                                   self.bench.global_batch, best)
        started = time.monotonic()
        try:
            ran = run_tree(method.argv(spec_file, config.nproc, config.precision), method_env(config.nproc), run_dir,
                           timeout, progress)
        except Hopeless as stop:
            self.durations.append(time.monotonic() - started)
            progress.done(str(stop))
            return Outcome(None, error=str(stop), seconds=self.durations[-1])
        try:
            records = read_records(run_dir, config.nproc)
            figures = compute_figures(records, ran.started, ran.wall_s, spec.steps, self.bench.warmup_steps)
            dev = evaluate_weights(self.bench.task, self.bench.dev_set, run_dir / FINAL_WEIGHTS,
                                   self.bench.task.recipe.eval_batch_size)
        except (ParatrainError, OSError, RuntimeError, ValueError) as exc:
            error = ran.error or f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if ran.status == "timed out" and timeout < self.settings.timeout_s:
                error = f"stopped at the end of the budget ({ran.error.rpartition('; ')[2]})"
            self.durations.append(time.monotonic() - started)
            progress.done(f"failed: {error}"[:300])
            return Outcome(None, error=error[:300], seconds=self.durations[-1])
        self.durations.append(time.monotonic() - started)
        metric = dev.get(self.bench.metric)
        progress.done(f"{figures.samples_per_s:,.0f} samples/s · dev {self.bench.metric} "
                      f"{metric if metric is not None else float('nan'):.4f} · {_fmt_s(self.durations[-1])}")
        return Outcome(figures.samples_per_s, tuple(figures.step_losses), metric, self.durations[-1],
                       window_s=figures.window_s)

    def _report(self, best: Config, stopped: str, elapsed: float) -> None:
        b, search = self.bench, self.search
        base = statistics.median(self.speeds[self.default])
        lines = ["", f"{'#':>2}  {'samples/s':>9}  {'vs default':>10}  {'dev ' + b.metric:>12}  candidate"]
        for config, outcome in search.results.items():
            runs = self.speeds.get(config, [])
            speed = f"{statistics.median(runs):,.0f}" if runs else "—"
            ratio = f"{statistics.median(runs) / base:.2f}×" if runs else "—"
            spread = f"  (median of {', '.join(f'{r:,.0f}' for r in runs)})" if len(runs) > 1 else ""
            metric = f"{outcome.metric:.4f}" if outcome.metric is not None else "—"
            mark = "  ← fastest in the band" if config == best else ""
            why = spread + (f"  [left out: {search.rejected[config]}]" if config in search.rejected else "")
            lines.append(f"{self.labels[config]:>2}  {speed:>9}  {ratio:>10}  {metric:>12}  "
                         f"{config.describe(b.global_batch)}{mark}{why}")
        if stopped:
            lines.append(stopped)
        chosen = statistics.median(self.speeds[best])
        runs = sum(len(v) for v in self.speeds.values()) + sum(1 for o in search.results.values() if o.samples_per_s is None)
        lines += ["", f"fastest: {best.describe(b.global_batch)} — {chosen:,.0f} samples/s, {chosen / base:.2f}× the "
                  f"default's {base:,.0f} ({runs} run{'s' if runs != 1 else ''} in {_fmt_s(elapsed)}, on this machine as loaded now)"]
        if task_ref.is_user_ref(self.settings.task):
            lines.append(f"  paratrain run --nproc-per-node {best.nproc} your_script.py   # with the calls below")
        else:
            lines.append("  " + train_command(best, self.settings.task, b.global_batch, self.settings.lr))
        lines.append("  " + runtime_call(best))
        lines.append("  " + fit_call(best, self.settings.task, b.global_batch))
        print("\n".join(lines), flush=True)

    def _write(self, best: Config, stopped: str) -> None:
        b = self.bench
        data = {
            "task": self.settings.task, "global_batch": b.global_batch, "steps": self.spec.steps,
            "budget_s": self.budget_s, "stopped": stopped,
            "choices": {k: list(v) for k, v in self.choices.values.items()}, "left_out": self.choices.left_out,
            "candidates": [{"config": asdict(c), "samples_per_s": o.samples_per_s, "runs": self.speeds.get(c, []), "metric": o.metric, "seconds": o.seconds,
                            "error": o.error, "left_out": self.search.rejected.get(c)}
                           for c, o in self.search.results.items()],
            "recommendation": asdict(best),
            "train_command": None if task_ref.is_user_ref(self.settings.task)
            else train_command(best, self.settings.task, b.global_batch, self.settings.lr),
            "runtime": runtime_call(best), "fit": fit_call(best, self.settings.task, b.global_batch),
        }
        path = self.settings.out / TUNE_FILE
        tmp = path.with_name(f".tmp-{TUNE_FILE}")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
        print(f"written: {path}", flush=True)

    def _say(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
