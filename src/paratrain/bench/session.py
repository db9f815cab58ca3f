"""One benchmark from start to end: check the inputs, write the shared initial weights,
run every method once per round, score them, write ``bench.md``, ``bench.json`` and ``bench.png``."""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import sys
from pathlib import Path
from typing import TextIO

import torch

from paratrain.tasks import task_ref
from paratrain.bench.evaluate import evaluate_weights
from paratrain.bench.figures import compute_figures, read_records
from paratrain.bench.machine import detect_machine
from paratrain.bench.load import Load, OtherWork, busy_cores
from paratrain.bench.methods import Method
from paratrain.bench.parity import (PARITY_STEPS, TOLERANCE, departure, differs, drift_envelope, first_departure, judged,
                                    loss_parity)
from paratrain.bench.record import FINAL_WEIGHTS, save_weights
from paratrain.bench.reports import render_json, render_markdown, render_png, table_lines
from paratrain.bench.results import FAILED, MEASURED, NOT_INSTALLED, NOT_RUN, TIMED_OUT, BenchResult, Row, Run
from paratrain.bench.round_plan import check_rounds, round_order, steps_for_min_time
from paratrain.bench.runner import ProgressLine, run_tree
from paratrain.bench.spec import BenchSpec
from paratrain.bench.settings import (BenchSettings, check_datasets, check_nproc, check_out_dir, method_env,
                                      settings_from_here)
from paratrain.bench.spread import BASELINE, check_baseline, per_round_ratio, pick_baseline, verdict
from paratrain.errors import ConfigError, ParatrainError
from paratrain.tasks.api import Task

REPORT_FILES = ("bench.md", "bench.json", "bench.png")
MAX_RAISES = 3  # round 1 starts again at most this often for --min-time
# Not a row: the second half of the reference pair (single is the first), run once to calibrate the drift note.
REFERENCE_PAIR = Method("reference-pair", "single with each batch split as data parallelism splits it",
                        "reference_pair.py", "python", multi_process=False)


class Bench:
    """Checks everything it can before it writes anything; then runs the methods one after another."""

    def __init__(self, settings: BenchSettings, stream: TextIO = sys.stderr):
        settings = settings_from_here(settings)
        self.settings = settings
        self.stream = stream
        self.machine = detect_machine()
        check_nproc(settings.nproc, self.machine, settings.methods)
        check_rounds(settings.repeats, settings.min_time_s)
        check_baseline(settings.baseline, [m.name for m in settings.methods])
        self.baseline: str | None = None
        self.drift_reference: float | None = None  # the reference pair's largest drift from single
        for name, value in (("--steps", settings.steps), ("--timeout", settings.timeout_s)):
            if value <= 0:
                raise ConfigError(f"{name} must be positive, got {value:g}")
        if settings.steps < 2:
            raise ConfigError(f"--steps must be at least 2 (one warm-up step and one measured), got {settings.steps}")
        self.task: Task = task_ref.resolve_task(settings.task, settings.task_options)
        self.task.check()
        self.train_set, self.dev_set = self.task.datasets()
        check_datasets(self.train_set, self.dev_set, settings.task)
        recipe = self.task.recipe
        self.global_batch = settings.global_batch or recipe.batch_size * settings.nproc
        if self.global_batch < 1 or self.global_batch % settings.nproc:
            raise ConfigError(
                f"--batch-size {self.global_batch} (the global batch) must be a positive multiple of --nproc-per-node "
                f"{settings.nproc}, so every process gets the same share"
            )
        self.lr = settings.lr if settings.lr is not None else recipe.lr
        self.warmup_steps = settings.warmup_steps or max(1, min(10, settings.steps // 5))
        if self.warmup_steps >= settings.steps:
            raise ConfigError(f"--warmup-steps {self.warmup_steps} leaves no measured step of --steps {settings.steps}")
        self.metric = recipe.metric
        check_out_dir(settings.out)

    # ---- the run ------------------------------------------------------------------------
    def run(self) -> BenchResult:
        s = self.settings
        load = self.machine.load_average
        work = s.out / "methods"
        work.mkdir(parents=True, exist_ok=True)
        init_weights = work / "init.safetensors"
        torch.manual_seed(s.seed)
        save_weights(self.task.build_model().state_dict(), init_weights)
        spec = BenchSpec(
            task=task_ref.absolute_ref(s.task), steps=s.steps, global_batch=self.global_batch, nproc=s.nproc, lr=self.lr,
            weight_decay=self.task.recipe.weight_decay, seed=s.seed, init_weights=str(init_weights.resolve()),
            task_options=s.task_options.to_dict(),
        )
        self._say(f"paratrain bench: {len(s.methods)} methods × {s.repeats} rounds · task {s.task} · {s.steps} steps × "
                  f"global batch {self.global_batch} · {s.nproc} processes · timeout {s.timeout_s:g}s each · "
                  f"load average {load[0]:g}")
        rows = [self._row(method) for method in s.methods]
        spec = self._rounds(rows, spec, work)
        for row in rows:
            row.summarize()
        self._compare(rows, spec, work)
        self._judge(rows)
        result = BenchResult(
            settings={
                "task": s.task, "methods": [m.name for m in s.methods], "nproc": s.nproc, "steps": spec.steps,
                "steps_asked": s.steps, "repeats": s.repeats, "min_time_s": s.min_time_s,
                "baseline": self.baseline, "baseline_asked": s.baseline,
                "drift_reference": self.drift_reference,
                "global_batch": self.global_batch, "lr": self.lr, "weight_decay": self.task.recipe.weight_decay,
                "precision": s.precision, "zero_stage": s.zero_stage, "timeout_s": s.timeout_s, "method_timeouts": s.method_timeouts, "seed": s.seed,
                "warmup_steps": self.warmup_steps, "parity_steps": min(PARITY_STEPS, spec.steps), "metric": self.metric,
                "train_samples": len(self.train_set), "dev_samples": len(self.dev_set),
                "task_options": s.task_options.to_dict(),
            },
            machine=self.machine.to_dict(),
            command=s.command,
            date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            rows=rows,
        )
        self._write_reports(result)
        return result

    def _row(self, method: Method) -> Row:
        s = self.settings
        precision = method.precision(s.precision, self.machine)
        row = Row(method=method.name, summary=method.summary, kind=MEASURED, precision=precision,
                  processes=method.processes(s.nproc))
        if method.note_here:
            note = method.note_here(self.machine, s.nproc)
            if note:
                row.notes.append(note)
        if precision != "32-true":
            row.notes.append(f"{precision}: parity shown, not judged")
        missing = method.missing()
        refused = method.refuses_here(self.machine, s.nproc) if method.refuses_here and not missing else None
        if missing or refused:
            row.kind, row.error = (NOT_INSTALLED, missing) if missing else (NOT_RUN, refused)
            self._say(f"{method.name:<16}  {row.error}")
        return row

    def _rounds(self, rows: list[Row], spec: BenchSpec, work: Path) -> BenchSpec:
        """Every runnable method once per round, the order rotated each round; returns the spec the
        rounds ran with. In round 1, a measured window shorter than --min-time raises the steps of
        every method and starts round 1 again (at most MAX_RAISES times). A method that failed or
        timed out is not run again."""
        s = self.settings
        runnable = [(method, row) for method, row in zip(s.methods, rows) if row.kind not in (NOT_INSTALLED, NOT_RUN)]
        raises, round_index = 0, 0
        while round_index < s.repeats:
            still = [(m, r) for m, r in runnable if all(run.measured for run in r.runs)]
            order = round_order(still, round_index)
            for position, (method, row) in enumerate(order, 1):
                label = f"[{round_index + 1}/{s.repeats} · {position}/{len(order)}] {method.name:<16}"
                run = self._run_once(round_index + 1, label, method, row, spec, work)
                row.runs.append(run)
                steps = steps_for_min_time(spec.steps, self.warmup_steps, run.window_s, s.min_time_s) if run.measured else spec.steps
                if round_index == 0 and steps > spec.steps and raises < MAX_RAISES:
                    raises += 1
                    self._say(f"{method.name}: {run.window_s:.2f}s of steady state in {spec.steps} steps, below "
                              f"--min-time {s.min_time_s:g}s; every method takes {steps} steps, round 1 again")
                    spec = dataclasses.replace(spec, steps=steps)
                    for other in rows:  # measured runs of fewer steps are not comparable; failures stand
                        other.runs = [r for r in other.runs if not r.measured]
                        other.figures, other.dev = None, None
                    break
            else:  # the round ran to its end
                round_index += 1
        return spec

    def _run_once(self, round_number: int, label: str, method: Method, row: Row, spec: BenchSpec, work: Path) -> Run:
        """One run of ``method``; the first measured run also gives the row its losses and dev scores."""
        s = self.settings
        method_dir = work / method.name / f"round-{round_number}"
        shutil.rmtree(method_dir, ignore_errors=True)
        method_dir.mkdir(parents=True)
        options = {**method.options, "zero_stage": s.zero_stage}
        spec_file = spec.for_method(method.name, row.precision, options, method_dir).save(method_dir)
        row.command = method.argv(spec_file, s.nproc, row.precision)
        progress = ProgressLine(self.stream, label, spec.steps)
        timeout = s.method_timeouts.get(method.name, s.timeout_s)
        before, others = busy_cores(), OtherWork()
        outcome = run_tree(row.command, self._env(row.processes), method_dir, timeout, progress)
        during = others.cores()
        load = Load(before=before, during=during, after=busy_cores())
        row.log = outcome.log
        run = Run(round=round_number, kind=MEASURED, load=load, started=outcome.started, error=outcome.error, log=outcome.log)
        if outcome.status == "timed out":
            run.kind = TIMED_OUT
            progress.done(f"{run.kind}: {run.error}")
            return run
        try:
            records = read_records(method_dir, row.processes)
            figures = compute_figures(records, outcome.started, outcome.wall_s, spec.steps, self.warmup_steps)
            if row.figures is None:
                row.dev = evaluate_weights(self.task, self.dev_set, method_dir / FINAL_WEIGHTS, self.task.recipe.eval_batch_size)
                row.figures = figures
        except (ParatrainError, OSError, RuntimeError, ValueError) as exc:
            if outcome.status == "failed":  # the child's own error says more than the missing results
                run.kind = FAILED
            else:
                run.kind, run.error = FAILED, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            progress.done(f"failed: {run.error}")
            return run
        if outcome.status == "failed":
            # Training finished and every result was written; the process died on its way out.
            run.note = f"crashed at exit after writing its results: {outcome.error}"
        run.wall_s, run.first_step_s, run.samples_per_s = figures.wall_s, figures.first_step_s, figures.samples_per_s
        run.window_s, run.peak_memory_bytes = figures.window_s, figures.peak_memory_bytes
        dev = row.dev.get(self.metric, float("nan")) if row.dev else float("nan")
        progress.done(f"{figures.wall_s:.1f}s · {figures.samples_per_s:,.0f} samples/s · dev {self.metric} {dev:.4f}"
                      + (f" · {run.note}" if run.note else "") + (f" · other work {load.describe()}" if load.changed else ""))
        return run

    def _env(self, processes: int) -> dict[str, str]:
        return method_env(processes)

    def _judge(self, rows: list[Row]) -> None:
        """Each measured row against the baseline (``--baseline``, else the fastest median of the rows
        that trained what ``single`` trained: a method that trained something else is no yardstick);
        notes for runs that crashed at exit, failed beside measured ones, or ran while other work came
        or went."""
        speeds = {row.method: row.spreads["samples_per_s"] for row in rows if row.measured}
        self.baseline = pick_baseline(speeds, self.settings.baseline,
                                      yardsticks={row.method for row in rows if row.measured and row.same_training})
        by_round = {row.method: {run.round: run.samples_per_s for run in row.measured_runs} for row in rows}
        for row in rows:
            if row.measured and self.baseline is not None:
                row.verdict = BASELINE if row.method == self.baseline else verdict(speeds[row.method], speeds[self.baseline])
                if row.method != self.baseline:
                    row.vs_baseline = per_round_ratio(by_round[row.method], by_round[self.baseline])
            for run in row.runs:
                where = f"round {run.round}" if self.settings.repeats > 1 else "the run"
                if run.note:
                    row.notes.append(f"{where}: {run.note}")
                if not run.measured and row.measured:
                    row.notes.append(f"{where} {run.kind}: {run.error}")
            busy = [run for run in row.runs if run.load.changed]
            if busy:
                most = max(max(run.load.before, run.load.during, run.load.after) for run in busy)
                rounds = ", ".join(str(run.round) for run in busy)
                row.notes.append(f"other work came, went or ran beside round{'s' if len(busy) > 1 else ''} {rounds} "
                                 f"(up to {most:g} cores busy): less sure")

    def _compare(self, rows: list[Row], spec: BenchSpec, work: Path) -> None:
        """Speed-up (median steady samples/s) and loss parity against ``single``, when it was measured;
        a full-precision method that leaves single's path by more than the reference pair does is noted."""
        reference = next((r for r in rows if r.method == "single" and r.measured), None)
        if reference is None:
            return
        others = [r for r in rows if r.measured and r is not reference and judged(r.precision)]
        envelope = self._drift_envelope(reference, spec, work) if others else None
        for row in rows:
            if not row.measured:
                continue
            row.speedup = row.spreads["samples_per_s"].median / reference.spreads["samples_per_s"].median
            row.parity = loss_parity(row.figures.step_losses, reference.figures.step_losses)
            row.parity_differs = differs(row.parity, row.precision)
            if row.parity_differs:
                row.notes.append("loss differs from single: not the same training (learning rate, data, batch or weights)")
            elif row in others and envelope is not None:
                found = departure(row.figures.step_losses, reference.figures.step_losses, envelope)
                if found:
                    step, gap, allowed = found
                    row.departs_at_step, row.leaves_single = step, True
                    row.notes.append(f"leaves single at step {step} by {gap:.1e}, beyond the {allowed:.1e} that two "
                                     "correct reductions of the same sums differ by there: not the same training "
                                     "(weights, clipping, learning rate, data, or an extra optimizer step?)")
            elif row in others:
                row.departs_at_step = first_departure(row.figures.step_losses, reference.figures.step_losses)
                if row.departs_at_step is not None:
                    drift = loss_parity(row.figures.step_losses, reference.figures.step_losses, steps=len(reference.figures.step_losses))
                    row.notes.append(f"equal to single for {row.departs_at_step - 1} steps, then drifts (max {drift:.1e} over "
                                     "the run; no reference pair to tell rounding from a difference)")

    def _drift_envelope(self, single: Row, spec: BenchSpec, work: Path) -> list[float] | None:
        """Train the reference pair's second half once (untimed) and measure its drift from ``single``."""
        method_dir = work / "reference-pair"
        shutil.rmtree(method_dir, ignore_errors=True)
        method_dir.mkdir(parents=True)
        spec_file = spec.for_method(REFERENCE_PAIR.name, "32-true", {}, method_dir).save(method_dir)
        progress = ProgressLine(self.stream, f"[reference] {'single split in ' + str(spec.nproc):<16}", spec.steps)
        outcome = run_tree(REFERENCE_PAIR.argv(spec_file, 1, "32-true"), self._env(1), method_dir, self.settings.timeout_s, progress)
        try:
            losses = read_records(method_dir, 1)[0].step_losses
        except (ParatrainError, OSError, ValueError) as exc:
            progress.done(f"failed ({outcome.error or exc}): full-precision drift judged against {TOLERANCE:g} alone")
            return None
        envelope = drift_envelope(losses, single.figures.step_losses)
        self.drift_reference = envelope[-1] if envelope else 0.0
        progress.done(f"drifts from single by at most {self.drift_reference:.1e} over {len(envelope)} steps")
        return envelope

    def _write_reports(self, result: BenchResult) -> None:
        out = self.settings.out
        for name, write in (
            ("bench.md", lambda p: p.write_text(render_markdown(result), encoding="utf-8")),
            ("bench.json", lambda p: p.write_text(render_json(result), encoding="utf-8")),
            ("bench.png", lambda p: render_png(result, p)),
        ):
            tmp = out / f".tmp-{name}"  # complete files only: written aside, then renamed
            write(tmp)
            os.replace(tmp, out / name)
        counts = ", ".join(f"{n} {kind}" for kind, n in result.counts().items())
        print("\n" + "\n".join(table_lines(result)) + f"\n\n{counts} · written: {out / 'bench.md'}, bench.json, bench.png",
              flush=True)

    def _say(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
