"""One benchmark from start to end: check the inputs, write the shared initial weights,
run every method in turn, score them, write ``bench.md``, ``bench.json`` and ``bench.png``."""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch

import paratrain
from paratrain.bench import task_ref
from paratrain.bench.evaluate import evaluate_weights
from paratrain.bench.figures import compute_figures, read_records
from paratrain.bench.machine import Machine, detect_machine
from paratrain.bench.methods import Method
from paratrain.bench.parity import PARITY_STEPS, differs, first_departure, judged, loss_parity
from paratrain.bench.record import FINAL_WEIGHTS, save_weights
from paratrain.bench.report_json import render_json
from paratrain.bench.report_md import render_markdown, table_lines
from paratrain.bench.report_png import render_png
from paratrain.bench.results import FAILED, MEASURED, NOT_INSTALLED, TIMED_OUT, BenchResult, Row
from paratrain.bench.runner import ProgressLine, run_tree
from paratrain.bench.spec import BenchSpec
from paratrain.errors import ConfigError, DataError, ParatrainError
from paratrain.tasks.api import Task, TaskOptions

REPORT_FILES = ("bench.md", "bench.json", "bench.png")
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                      "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")


@dataclass(frozen=True)
class BenchSettings:
    """What ``paratrain bench`` was asked; ``None`` fields take the task's recipe."""

    task: str
    methods: list[Method]
    out: Path
    nproc: int = 2
    steps: int = 60
    global_batch: int | None = None
    lr: float | None = None
    precision: str = "32-true"
    zero_stage: int = 2
    timeout_s: float = 900.0
    method_timeouts: dict[str, float] = field(default_factory=dict)
    seed: int = 42
    warmup_steps: int | None = None
    task_options: TaskOptions = field(default_factory=TaskOptions)
    command: list[str] = field(default_factory=list)


def parse_timeouts(text: str, methods: list[str]) -> tuple[float, dict[str, float]]:
    """``"600,hf-trainer=1200"`` → ``(600.0, {"hf-trainer": 1200.0})``.

    Raises:
        ConfigError: a value is not a positive number, or names a method not being run.
    """
    default, overrides = 900.0, {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not seconds > 0:
            raise ConfigError(f"--timeout {text!r}: {part!r} is not a positive number of seconds (write 600 or hf-trainer=1200)")
        if name and name not in methods:
            raise ConfigError(f"--timeout {text!r}: {name!r} is not one of the methods run ({', '.join(methods)})")
        if name:
            overrides[name] = seconds
        else:
            default = seconds
    return default, overrides


def check_nproc(nproc: int, machine: Machine, methods: list[Method]) -> None:
    """On a GPU machine every process of a multi-process method takes one GPU (and DataParallel
    splits over at most all of them), so more processes than GPUs cannot run.

    Raises:
        ConfigError: names the GPU count and the methods concerned.
    """
    if nproc < 1:
        raise ConfigError(f"--nproc-per-node must be at least 1, got {nproc}")
    if machine.gpu_count and nproc > machine.gpu_count:
        names = ", ".join(m.name for m in methods if m.multi_process or m.name == "dp")
        raise ConfigError(
            f"--nproc-per-node {nproc} is more than this machine's {machine.gpu_count} GPUs, and {names} use one GPU "
            f"per process; use --nproc-per-node {machine.gpu_count} or fewer"
        )


def check_out_dir(out: Path) -> None:
    """Create ``out`` if needed and prove a file can be written there.

    Raises:
        ConfigError: ``out`` cannot be created or written (says why).
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write to --out {out} ({exc.strerror or exc}); choose a writable directory") from None


def check_datasets(train_set, dev_set, task: str) -> None:
    """Before any method starts: a method cannot train on no samples, nor the bench score on none.

    Raises:
        DataError: names the empty set and the task.
    """
    for name, dataset in (("training", train_set), ("dev", dev_set)):
        if len(dataset) == 0:
            raise DataError(f"--task {task}: the {name} set is empty; check the task's data (--data, --limit-train, --limit-eval)")


def absolute_path(path: str | Path) -> Path:
    """``path`` as typed (``~`` expanded), made absolute against the current directory."""
    return Path(os.path.abspath(Path(path).expanduser()))


def settings_from_here(settings: BenchSettings) -> BenchSettings:
    """The paths a user typed, made absolute here: every method process starts in a folder
    of its own, where a relative ``--out`` or ``--data`` would name nothing."""
    options = settings.task_options
    return dataclasses.replace(
        settings,
        out=absolute_path(settings.out),
        task_options=dataclasses.replace(
            options, **{name: str(absolute_path(getattr(options, name)))
                        for name in ("data", "model_path") if getattr(options, name)}),
    )


class Bench:
    """Checks everything it can before it writes anything; then runs the methods one after another."""

    def __init__(self, settings: BenchSettings, stream: TextIO = sys.stderr):
        settings = settings_from_here(settings)
        self.settings = settings
        self.stream = stream
        self.machine = detect_machine()
        check_nproc(settings.nproc, self.machine, settings.methods)
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
        self._say(f"paratrain bench: {len(s.methods)} methods · task {s.task} · {s.steps} steps × global batch "
                  f"{self.global_batch} · {s.nproc} processes · timeout {s.timeout_s:g}s each · load average {load[0]:g}")
        rows = [self._run_method(i, method, spec, work) for i, method in enumerate(s.methods, 1)]
        self._compare(rows)
        result = BenchResult(
            settings={
                "task": s.task, "methods": [m.name for m in s.methods], "nproc": s.nproc, "steps": s.steps,
                "global_batch": self.global_batch, "lr": self.lr, "weight_decay": self.task.recipe.weight_decay,
                "precision": s.precision, "zero_stage": s.zero_stage, "timeout_s": s.timeout_s, "method_timeouts": s.method_timeouts, "seed": s.seed,
                "warmup_steps": self.warmup_steps, "parity_steps": min(PARITY_STEPS, s.steps), "metric": self.metric,
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

    def _run_method(self, index: int, method: Method, spec: BenchSpec, work: Path) -> Row:
        s = self.settings
        precision = method.precision(s.precision, self.machine)
        processes = method.processes(s.nproc)
        row = Row(method=method.name, summary=method.summary, kind=MEASURED, precision=precision, processes=processes)
        if method.note_here:
            note = method.note_here(self.machine, s.nproc)
            if note:
                row.notes.append(note)
        if precision != "32-true":
            row.notes.append(f"{precision}: parity shown, not judged")
        label = f"[{index}/{len(s.methods)}] {method.name:<16}"
        missing = method.missing()
        if missing:
            row.kind, row.error = NOT_INSTALLED, missing
            self._say(f"{label}  {missing}")
            return row
        method_dir = work / method.name
        shutil.rmtree(method_dir, ignore_errors=True)
        method_dir.mkdir(parents=True)
        options = {**method.options, "zero_stage": s.zero_stage}
        spec_file = spec.for_method(method.name, precision, options, method_dir.resolve()).save(method_dir)
        row.command = method.argv(spec_file, s.nproc, precision)
        progress = ProgressLine(self.stream, label, s.steps)
        timeout = s.method_timeouts.get(method.name, s.timeout_s)
        outcome = run_tree(row.command, self._env(processes), method_dir, timeout, progress)
        row.log = outcome.log
        if outcome.status != "finished":
            row.kind, row.error = (TIMED_OUT if outcome.status == "timed out" else FAILED), outcome.error
            progress.done(f"{row.kind}: {row.error}")
            return row
        try:
            records = read_records(method_dir, processes)
            row.figures = compute_figures(records, outcome.started, outcome.wall_s, s.steps, self.warmup_steps)
            row.dev = evaluate_weights(self.task, self.dev_set, method_dir / FINAL_WEIGHTS, self.task.recipe.eval_batch_size)
        except (ParatrainError, OSError, RuntimeError, ValueError) as exc:
            row.kind, row.error = FAILED, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            progress.done(f"failed: {row.error}")
            return row
        f = row.figures
        progress.done(f"{f.wall_s:.1f}s · {f.samples_per_s:,.0f} samples/s · dev {self.metric} {row.dev.get(self.metric, float('nan')):.4f}")
        return row

    def _env(self, processes: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
        source = str(Path(paratrain.__file__).resolve().parents[1])  # this paratrain, whatever else is installed
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, os.getcwd(), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        if processes > 1 and "OMP_NUM_THREADS" not in os.environ:
            # What torchrun does for its own workers, for every launcher: N processes share the cores
            # instead of each starting a thread per core.
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // processes))
        return env

    def _compare(self, rows: list[Row]) -> None:
        """Speed-up (steady samples/s) and loss parity against ``single``, when it was measured."""
        reference = next((r for r in rows if r.method == "single" and r.measured), None)
        for row in rows:
            if not row.measured or reference is None:
                continue
            row.speedup = row.figures.samples_per_s / reference.figures.samples_per_s
            row.parity = loss_parity(row.figures.step_losses, reference.figures.step_losses)
            row.parity_differs = differs(row.parity, row.precision)
            if row.parity_differs:
                row.notes.append("loss differs from single: not the same training (learning rate, data, batch or weights)")
            elif judged(row.precision):
                row.departs_at_step = first_departure(row.figures.step_losses, reference.figures.step_losses)
                if row.departs_at_step is not None:
                    drift = loss_parity(row.figures.step_losses, reference.figures.step_losses, steps=len(reference.figures.step_losses))
                    row.notes.append(f"equal to single for {row.departs_at_step - 1} steps, then drifts (max {drift:.1e} over the run)")

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
