"""Goodput, measured: what a checkpoint costs training, and where a faulty run's time goes.

Two parts, each through the real ``paratrain train`` on 2 processes, its numbers read from the run's own
goodput ledger (``goodput.jsonl``) and checked against a clock outside the job:

``--part cost`` (through ``paratrain run`` of the worker ``paratrain train`` starts, wrapped to also time all that the
fit loop does for each save: its checks and the save): one task (text-cls by default) for ``--steps`` steps with
no saves, then saves every 10 steps
written in the foreground (``--no-background-save``: what a save cost before background writes) and in the
background, in alternating order over ``--rounds`` (``--strategy``: the strategy of ``paratrain train``, default auto): each save's blocking time (p50/p99) as a share of the median
step, and the seconds per step with saves against without (throughput cost).

``--part soak``: digits for ``--soak-steps`` steps under failures injected at random (exponential gaps of mean
``--mtbf`` seconds; a worker SIGKILLed — the agent restarts the group —, the whole job SIGKILLed, or SIGTERM —
save, exit 75 —; after the job ended, the same command again), for each configuration: foreground saves every
``--fixed`` steps, background saves every ``--fixed`` steps, and ``--save-every auto --mtbf`` (``--configs
auto-warm``: the last with ``--warm-workers``, restarts that fork workers from a pool that imported torch once).
Per configuration: the outside clock, the ledger's wall time and categories, goodput (ledger) and goodput by the
outside clock, failures, and whether the final weights equal those of an uninterrupted run bit for bit.

``--part startup``: a digits job of 2 processes restarted ``--rounds`` times (each run of the command resumes from
the newest checkpoint), its start-up from the launch to the first step split into parts (the launcher, python,
``import torch``, paratrain's worker modules, the rendezvous, data, model and optimizer, wrapping, the checkpoint
load, the rest), wall and CPU seconds of rank 0's worker; with ``--baseline-src``, another tree's code restarted
alternately with this one's (``--part cost`` too: each mode with both, one run after the other).

``--part fault-cost``: one SIGTERM and one worker SIGKILL of a digits job on 2 processes, each fault's seconds to the
next first step split into the stop, the exit and the start by the run's ledger, with the CPU seconds of the stop and
exit (``--rounds`` rounds; with ``--baseline-src``, another tree's code in alternate rounds).

``--part overhead``: the ledger's own cost per step (:func:`paratrain.goodput.ledger.step_done` with an open
ledger, flushes included), in microseconds, against the median digits and text-cls steps of ``--part cost``.

    python benchmarks/goodput.py --part overhead
    python benchmarks/goodput.py --part cost --rounds 2
    python benchmarks/goodput.py --part cost --steps 100 --rounds 1 --modes none,background --baseline-src /tmp/base/src
    python benchmarks/goodput.py --part cost --strategy fsdp --steps 60 --rounds 1 --modes foreground,background
    python benchmarks/goodput.py --part soak --mtbf 60 --soak-steps 12000 --seed 1
    python benchmarks/goodput.py --part soak --mtbf 60 --soak-steps 45000 --seed 2 --warm-workers --reference-alongside
    python benchmarks/goodput.py --part startup --rounds 3 --baseline-src /tmp/base/src
    python benchmarks/goodput.py --part fault-cost --rounds 3 --baseline-src /tmp/base/src
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from warm_restart import agents_worker  # run as `python benchmarks/goodput.py`: its folder is on the path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _env(src: Path = SRC) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARATRAIN_", "TORCHELASTIC_", "PET_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["OMP_NUM_THREADS"] = "1"
    return env


def _records(out: Path) -> list[dict]:
    from paratrain.goodput.ledger import LEDGER_FILE, read_records

    return read_records(out / "checkpoints" / LEDGER_FILE)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))] if ordered else float("nan")


# ---- part 1: what a save costs ---------------------------------------------------------------------
def cost_run(task: str, steps: int, mode: str, workdir: Path, src: Path = SRC, strategy: str = "auto",
             nproc: int = 2) -> dict:
    out = workdir / f"{task}-{mode}-{time.monotonic_ns()}"
    flags = {"none": [], "foreground": ["--save-every", "10", "--no-background-save"],
             "background": ["--save-every", "10"]}[mode]
    record = workdir / f"{out.name}-worker"  # the worker notes how long each save held the fit loop
    command = [sys.executable, "-m", "paratrain", "run", "--nproc-per-node", str(nproc), str(Path(__file__).resolve()),
               "--startup-worker", str(record), task, "--max-steps", str(steps),
               "--no-eval-per-epoch", "--log-every", str(steps), "--keep-last", "2", "--no-tensorboard",
               "--no-progress", "--strategy", strategy, "--out", str(out), *flags]
    done = subprocess.run(command, env=_env(src), capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    records = _records(out)
    ledger = [r for r in records if r.get("event") == "ledger"][-1]
    seconds = ledger["seconds"]
    timed = ledger["timed_steps"]
    # the step time: training seconds over the steps after the first; with saves, the whole loop's
    # seconds between the first and the last step (training, save blocking, the loop around them)
    step_s = seconds.get("train", 0.0) / timed
    loop_s = (seconds.get("train", 0.0) + seconds.get("save", 0.0) + seconds.get("rest", 0.0)) / timed
    events = [r for r in records if r.get("event") == "save"]
    worker = json.loads(Path(f"{record}.rank0.json").read_text())
    in_loop = worker["saves"]  # one per save record, in order
    kept = [i for i, r in enumerate(events) if r.get("step", 0) < steps][1 if mode == "background" else 0:]
    share = seconds.get("save", 0.0) / (seconds.get("train", 0.0) + seconds.get("save", 0.0) + seconds.get("rest", 0.0))
    # a step that waited for a background save's copy of the optimizer's state (save blocking too, outside the save)
    copy_waits = [float(r.get("seconds", 0.0)) for r in records if r.get("event") == "copy_wait"]
    writes = [r for r in records if r.get("event") == "written"]
    return {"mode": mode, "step_s": step_s, "loop_s": loop_s, "share": share, "copy_waits": copy_waits,
            "saves": [events[i]["end"] - events[i]["start"] for i in kept], "loop_saves": [in_loop[i] for i in kept],
            "write_cpu": [cpu for _, cpu in worker.get("writes", [])], **_cost_within_run(worker["steps"], writes)}


def _cpu_per_write(cpu: list[float]) -> str:
    """The CPU time rank 0's writing thread spent on each background write (median and most), in words."""
    if not cpu:
        return "wrote nothing in the background"
    return f"{statistics.median(cpu) * 1000:.0f} ms CPU per write (most {max(cpu) * 1000:.0f} ms, {len(cpu)} writes)"


#: steps between saves in the cost runs; the steps at places COST_FAR of each cycle are far from any save
COST_EVERY, COST_FAR = 10, (5, 6, 7, 8, 9, 0)


def _cost_within_run(ends: list[float], writes: list[dict]) -> dict:
    """What saving every COST_EVERY steps costs, measured inside one run against its own steps (so a load that
    changes between runs does not enter it): the time of the steps after the first save over the time the same
    number of steps takes far from a save (the mean of the steps at places COST_FAR of a cycle that began after
    the cycle's background write had ended), minus one. ``late``: the background writes still running when the
    first far step of their cycle began; their cycle's far steps that began before the write ended are left out
    of the pace (they share its cost). A run without saves gives the same figure for its steps at the same
    places: the noise of the statistic. ``ends``: when each step ended (step k is ``ends[k - 1]``)."""
    intervals = {step: ends[step - 1] - ends[step - 2] for step in range(COST_EVERY + 2, len(ends) + 1)}
    written = {}  # a save's step: when its background write ended
    for write in writes:
        written[int(write["name"].rsplit("-", 1)[-1])] = write["end"]

    def far_from_a_save(step: int) -> bool:
        if step % COST_EVERY not in COST_FAR:
            return False
        saved_at = (step - 1) // COST_EVERY * COST_EVERY  # the save of this step's cycle
        return step - 2 < 0 or ends[step - 2] >= written.get(saved_at, float("-inf"))

    far = [seconds for step, seconds in intervals.items() if far_from_a_save(step)]
    late = sum(1 for saved_at, end in written.items()
               if saved_at + COST_FAR[0] - 2 < len(ends) and end > ends[saved_at + COST_FAR[0] - 2])
    within = sum(intervals.values()) / (len(intervals) * statistics.mean(far)) - 1 if far else float("nan")
    return {"within": within, "late": late}


def part_cost(args: argparse.Namespace, workdir: Path) -> list[str]:
    """Each mode with this tree's code and, with ``--baseline-src``, with another's, run after run (so
    both see the same load); each save's blocking over its own run's step time."""
    trees = [("", SRC)] + ([(" (baseline)", Path(args.baseline_src).resolve())] if args.baseline_src else [])
    runs: dict[tuple[str, str], list[dict]] = {}
    for round_ in range(args.rounds):
        order = [(mode, tree) for mode in ("none", "foreground", "background") if mode in args.modes for tree in trees]
        if round_ % 2:
            order.reverse()
        for mode, (label, src) in order:
            run = cost_run(args.task, args.steps, mode, workdir, src, args.strategy, args.nproc)
            runs.setdefault((mode, label), []).append(run)
            print(f"  round {round_ + 1} {mode}{label}: {run['loop_s'] * 1000:.1f} ms/step, step {run['step_s'] * 1000:.1f} ms, "
                  f"blocking {', '.join(f'{s * 1000:.0f}' for s in run['saves'])} ms (ledger), "
                  f"{', '.join(f'{s * 1000:.0f}' for s in run['loop_saves'])} ms (the fit loop's whole save); "
                  f"{len(run['copy_waits'])} step(s) waited for a copy ({sum(run['copy_waits']) * 1000:.1f} ms); "
                  f"in the run {run['within']:+.1%} against its steps far from a save ({run['late']} late writes); "
                  f"rank 0's writing thread {_cpu_per_write(run['write_cpu'])}",
                  flush=True)
    lines = [f"## what a save costs: {args.task}, {args.nproc} process(es) on {os.cpu_count()} CPUs, strategy {args.strategy}, {args.steps} steps, saves every 10 steps, "
             f"{args.rounds} round(s); load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end", "",
             "| code | saves | step (same runs) | blocking p50 | blocking p99 | p50 / step | p99 / step "
             "| the loop's whole save: p50 / step | p99 / step | save blocking / loop time | s per step vs no saves "
             "| in the run: its steps against those far from a save (each round) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, _ in trees:
        plain = runs.get(("none", label)) or [r for (m, l), rs in runs.items() if l == label for r in rs]
        base = statistics.median(r["loop_s"] for r in plain)
        for mode in [m for m in ("none", "foreground", "background") if (m, label) in runs]:
            done = runs[(mode, label)]
            step_s = statistics.median(r["step_s"] for r in done)
            ratios = [s / r["step_s"] for r in done for s in r["saves"]]
            blocks = [s for r in done for s in r["saves"]]
            loop = statistics.median(r["loop_s"] for r in done)
            whole = [s / r["step_s"] for r in done for s in r["loop_saves"]]
            cells = (f"{_percentile(blocks, 0.5) * 1000:.1f} ms | {_percentile(blocks, 0.99) * 1000:.1f} ms | "
                     f"{_percentile(ratios, 0.5):.1%} | {_percentile(ratios, 0.99):.1%} | "
                     f"{_percentile(whole, 0.5):.1%} | {_percentile(whole, 0.99):.1%}") if blocks else "— | — | — | — | — | —"
            within = ", ".join(f"{r['within']:+.1%}" for r in done)
            lines.append(f"| {label.strip(' ()') or 'this tree'} | {mode} | {step_s * 1000:.0f} ms | {cells} | "
                         f"{statistics.median(r['share'] for r in done):.1%} | {loop / base - 1:+.1%} | {within} |")
    return lines


# ---- where a restart's start-up goes ---------------------------------------------------------------
STARTUP_PARTS = ("rendezvous (pt.Runtime)", "data (task.datasets)", "model + optimizer", "wrap (rt.setup)",
                 "checkpoint load (resume)")  # the worker's spans, in the order it runs them


def startup_worker(argv: list[str]) -> int:
    """A ``paratrain train`` worker that notes when each part of its start-up ended (``--startup-worker
    FILE TRAIN-ARGS``): run by ``paratrain run`` in place of ``python -m paratrain.cli.workers.train``."""
    started = time.time()
    out, argv = argv[0], argv[1:]
    marks: dict[str, float] = {"process": psutil.Process().create_time(), "script": started,
                               "launch": float(os.environ.get("PARATRAIN_LAUNCH_TIME", "nan"))}
    cpu: dict[str, float] = {"script": time.process_time()}  # this process's CPU seconds at the same marks
    import torch  # noqa: F401

    marks["torch imported"], cpu["torch imported"] = time.time(), time.process_time()
    from paratrain.cli.workers import train as worker
    from paratrain.loop import checkpoints, trainer
    from paratrain.goodput import ledger
    from paratrain.runtime import runtime

    marks["paratrain imported"], cpu["paratrain imported"] = time.time(), time.process_time()
    spans: dict[str, list[float]] = {}  # label: [start, end, CPU seconds inside]

    def timed(owner, name, label):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            begin, begin_cpu = time.time(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                spans.setdefault(label, [begin, time.time(), time.process_time() - begin_cpu])

        setattr(owner, name, wrapper)

    timed(runtime.Runtime, "__init__", "rendezvous (pt.Runtime)")
    timed(runtime.Runtime, "setup", "wrap (rt.setup)")
    timed(checkpoints.LoopCheckpoints, "resume", "checkpoint load (resume)")
    original_fit = trainer.Trainer._fit

    def fit(self):
        task = self.task
        for name, label in (("datasets", "data (task.datasets)"), ("build_model", "model + optimizer"),
                            ("build_optimizer", "model + optimizer")):
            method = getattr(task, name)

            def wrapper(*args, _method=method, _label=label, **kwargs):
                begin, begin_cpu = time.time(), time.process_time()
                try:
                    return _method(*args, **kwargs)
                finally:
                    span = spans.setdefault(_label, [begin, time.time(), 0.0])
                    span[1] = time.time()
                    span[2] += time.process_time() - begin_cpu

            setattr(task, name, wrapper)
        return original_fit(self)

    trainer.Trainer._fit = fit
    original_step = ledger.Ledger.step_done

    steps: list[float] = []  # when each step ended (the ledger's step number is its place in this list)

    def step_done(self):
        original_step(self)
        steps.append(time.time())
        if "first step" not in marks:
            marks["first step"], cpu["first step"] = time.time(), time.process_time()

    ledger.Ledger.step_done = step_done
    saves: list[float] = []  # all that the fit loop does for each save: its checks and Checkpointer.save
    original_save = trainer.Trainer._save

    def save(self):
        begin = time.perf_counter()
        try:
            return original_save(self)
        finally:
            saves.append(time.perf_counter() - begin)

    trainer.Trainer._save = save
    from paratrain.checkpoint import background

    writes: list[list[float]] = []  # each background write: [wall seconds, its thread's CPU seconds]
    original_run = background.BackgroundWrite._run

    def run(self):
        begin, begin_cpu = time.perf_counter(), time.thread_time()
        try:
            return original_run(self)
        finally:
            writes.append([time.perf_counter() - begin, time.thread_time() - begin_cpu])

    background.BackgroundWrite._run = run
    try:
        return worker.main(argv)
    finally:
        with open(f"{out}.rank{os.environ.get('RANK', '0')}.json", "w") as file:
            json.dump({"marks": marks, "cpu": cpu, "spans": spans, "saves": saves, "steps": steps, "writes": writes},
                      file)


def startup_parts(record: dict) -> dict[str, tuple[float, float | None]]:
    """``(wall seconds, CPU seconds of the worker)`` per part of one worker's start-up, from the launch to its
    first step; what is not in a part is "other". CPU seconds move much less with the machine's load."""
    marks, cpu, spans = record["marks"], record["cpu"], record["spans"]
    launch = marks["launch"]
    parts = {"launcher → worker process": (marks["process"] - launch, None),
             "python start-up": (marks["script"] - marks["process"], cpu["script"]),
             "import torch": (marks["torch imported"] - marks["script"], cpu["torch imported"] - cpu["script"]),
             "import paratrain (worker modules)": (marks["paratrain imported"] - marks["torch imported"],
                                                   cpu["paratrain imported"] - cpu["torch imported"])}
    for label in STARTUP_PARTS:
        begin, end, seconds = spans.get(label, (0.0, 0.0, 0.0))
        parts[label] = (end - begin, seconds)
    total = (marks["first step"] - launch, cpu["first step"])
    parts["other (out dir, checks, loaders, first step, ...)"] = (
        total[0] - sum(wall for wall, _ in parts.values()), total[1] - sum(c or 0.0 for _, c in parts.values()))
    parts["total: launch → first step"] = total
    return parts


def part_startup(args: argparse.Namespace, workdir: Path) -> list[str]:
    """A digits run of 40 steps, then ``--rounds`` restarts of the whole job (each resumes from the newest
    checkpoint and trains 20 steps more), for this tree and ``--baseline-src``, restart after restart."""
    trees = [("this tree", SRC)] + ([("baseline", Path(args.baseline_src).resolve())] if args.baseline_src else [])
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}

    def launch(label: str, src: Path, steps: int, tag: str) -> Path:
        out = workdir / f"startup-{label.replace(' ', '-')}"
        record = workdir / f"startup-{label.replace(' ', '-')}-{tag}"
        command = [sys.executable, "-m", "paratrain", "run", "--nproc-per-node", "2", str(Path(__file__).resolve()),
                   "--startup-worker", str(record), "digits", "--batch-size", "2", "--max-steps", str(steps),
                   "--save-every", "20", "--no-eval-per-epoch", "--log-every", "1000", "--keep-last", "2",
                   "--no-tensorboard", "--no-progress", "--out", str(out)]
        done = subprocess.run(command, env=_env(src), capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"{label} run failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return record

    for label, src in trees:
        launch(label, src, 40, "fresh")
    for round_ in range(args.rounds):
        for label, src in (trees if round_ % 2 == 0 else list(reversed(trees))):
            record = launch(label, src, 60 + 20 * round_, f"restart{round_}")
            parts = startup_parts(json.loads(Path(f"{record}.rank0.json").read_text()))
            results[label].append(parts)
            print(f"  restart {round_ + 1} {label}: {parts['total: launch → first step'][0]:.2f} s", flush=True)
    names = list(results[trees[0][0]][0])
    lines = [f"## start-up of a restarted digits job (2 processes, rank 0), median of {args.rounds} restart(s); "
             f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} at the end", "",
             "| part | " + " | ".join(f"{label}: wall | {label}: worker CPU" for label, _ in trees) + " |",
             "|---|" + "---|---|" * len(trees)]
    for name in names:
        cells = []
        for label, _ in trees:
            cells.append(f"{statistics.median(r[name][0] for r in results[label]):.2f} s")
            cpu = [r[name][1] for r in results[label] if r[name][1] is not None]
            cells.append(f"{statistics.median(cpu):.2f} s" if cpu else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


# ---- what one fault costs -------------------------------------------------------------------------
def _tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its living descendants, and of the children they reaped."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return total
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.Error:
            continue
    return total


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _first_step(out: Path, attempt: int) -> float | None:
    """When ``attempt``'s first step was done (its ledger: origin + start-up), once it has one."""
    for record in _records(out):
        if record.get("event") == "ledger" and record.get("attempt") == attempt and (record.get("seconds") or {}).get("train"):
            from paratrain.goodput import accounting

            run = accounting.account(_records(out))
            found = [a for a in run.attempts if a.number == attempt]
            return found[0].origin + found[0].seconds.get("startup", 0.0) if found else None
    return None


def _wait_first_step(out: Path, attempt: int, process: subprocess.Popen, log: Path) -> tuple[float, float]:
    """(when ``attempt``'s first step was done, the job's CPU seconds by then, sampled when this script saw it)."""
    deadline = time.monotonic() + 600
    while (first := _first_step(out, attempt)) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the job ended or hung before attempt {attempt}'s first step; see {log}")
        time.sleep(0.05)
    return first, _tree_cpu(process.pid)


def fault_cost_round(workdir: Path, label: str, src: Path, train_s: float) -> dict[str, float]:
    """One SIGTERM and one worker SIGKILL of a digits job on 2 processes, split by the ledger (see ``part_fault_cost``)."""
    out = workdir / f"fault-{label.replace(' ', '-')}-{time.monotonic_ns()}"
    log = out.with_suffix(".log")
    command = [sys.executable, "-m", "paratrain", "train", "digits", "--nproc-per-node", "2", "--batch-size", "2",
               "--max-steps", "1000000", "--save-every", "50", "--max-restarts", "1", "--no-eval-per-epoch",
               "--log-every", "100000", "--keep-last", "2", "--no-tensorboard", "--no-progress", "--out", str(out)]
    result: dict[str, float] = {}
    with open(log, "a") as console:
        first = subprocess.Popen(command, env=_env(src), stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_first_step(out, 1, first, log)
            time.sleep(train_s)
            workers = [p for p in psutil.Process(first.pid).children() if "paratrain.cli.workers.train" in " ".join(p.cmdline())]
            cpu_before = _tree_cpu(first.pid)
            signalled = time.time()
            first.send_signal(signal.SIGTERM)
            workers_gone = None
            while True:  # the launcher's rusage counts the workers it reaped
                pid, status, usage = os.wait4(first.pid, os.WNOHANG)
                if pid:
                    break
                if workers_gone is None and not any(_alive(w) for w in workers):
                    workers_gone = time.time()
                time.sleep(0.01)
            exited = time.time()
            workers_gone = workers_gone or exited
            first.returncode = os.waitstatus_to_exitcode(status)
        finally:
            _kill_group(first.pid)
        if first.returncode != 75:
            raise SystemExit(f"{label}: SIGTERM ended the job with {first.returncode}, not 75; see {log}")
        stop_cpu = usage.ru_utime + usage.ru_stime - cpu_before
        launched = time.time()
        second = subprocess.Popen(command, env=_env(src), stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            step2, start_cpu = _wait_first_step(out, 2, second, log)
            time.sleep(train_s)
            worker = agents_worker(second.pid, 1)
            if worker is None:
                raise SystemExit(f"{label}: no worker of rank 1 to kill; see {log}")
            killed = time.time()
            worker.kill()
            step3, _ = _wait_first_step(out, 3, second, log)
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=600)
        finally:
            _kill_group(second.pid)
    records = _records(out)
    ledger1 = [r for r in records if r.get("event") == "ledger" and r.get("attempt") == 1]
    end1 = [r["time"] for r in records if r.get("event") == "end" and signalled <= r["time"] <= exited + 1]
    ledger2 = [r for r in records if r.get("event") == "ledger" and r.get("attempt") == 2]
    # a process's start is read from /proc on a clock whose boot time has whole seconds: put it on time.time()'s
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
    skew = time.time() - float(Path("/proc/uptime").read_text().split()[0]) - boot
    origin3 = [r.get("origin", r["time"]) + skew for r in records if r.get("event") == "attempt" and r.get("attempt") == 3]
    if not (ledger1 and end1 and ledger2 and origin3):
        raise SystemExit(f"{label}: the ledger lacks a record this benchmark reads; see {out}")
    result["SIGTERM → rank 0's last ledger record (the step, the final save)"] = ledger1[-1]["time"] - signalled
    result["→ both workers ended"] = workers_gone - ledger1[-1]["time"]
    result["→ the launcher's end record"] = end1[0] - workers_gone
    result["stop: SIGTERM → the launcher's end record"] = end1[0] - signalled
    result["exit: the launcher's end record → its exit"] = exited - end1[0]
    result["its exit → next launch (this script)"] = launched - exited
    result["start: next launch → first step"] = step2 - launched
    result["SIGTERM → next first step"] = step2 - signalled
    result["CPU: the stop and exit (launcher + workers)"] = stop_cpu
    result["CPU: the next job's start-up (launcher + workers)"] = start_cpu
    kill_last = [r["time"] for r in ledger2 if r["time"] >= killed]
    result["kill -9: → attempt's last record"] = (max(kill_last) if kill_last else killed) - killed
    result["kill -9: last record → new workers' start"] = origin3[0] - (max(kill_last) if kill_last else killed)
    result["kill -9: new workers' start → first step"] = step3 - origin3[0]
    result["kill -9 → next first step"] = step3 - killed
    return result


def part_fault_cost(args: argparse.Namespace, workdir: Path) -> list[str]:
    """``--rounds`` rounds of a digits job on 2 processes (batches of 2, a save every 50 steps, ``--max-restarts 1``):
    ``--train`` seconds after its first step, SIGTERM to the launcher (the workers save and exit 75); the same
    command again at once, which resumes; ``--train`` seconds after its first step, rank 1's worker SIGKILLed (the agent
    restarts the group), then SIGTERM. The seconds from each fault to the next first step, split by the ledger: the
    stop (the signal to the launcher's last record: the step, the final save, the workers' and the agent's end), the
    exit (that record to the launcher's exit, by this script's clock), the start (the next launch to its first step);
    for the kill, the surviving rank's last record, the agent's restart, the new workers' start-up. CPU seconds of the
    launcher and its workers: from the SIGTERM to the launcher's exit (``wait4``'s rusage less the tree's CPU before),
    and of the next job up to its first step (sampled when this script sees it). With ``--baseline-src``, another
    tree's code in alternate rounds."""
    trees = [("this tree", SRC)] + ([("baseline", Path(args.baseline_src).resolve())] if args.baseline_src else [])
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    loads = [os.getloadavg()[0]]
    for round_ in range(args.rounds):
        for label, src in (trees if round_ % 2 == 0 else list(reversed(trees))):
            row = fault_cost_round(workdir, label, src, args.train)
            results[label].append(row)
            loads.append(os.getloadavg()[0])
            print(f"  round {round_ + 1} {label}: SIGTERM → first step {row['SIGTERM → next first step']:.2f} s, "
                  f"kill -9 → first step {row['kill -9 → next first step']:.2f} s", flush=True)
    names = list(results[trees[0][0]][0])
    lines = [f"## what a fault costs: digits, 2 processes, median of {args.rounds} round(s); 1-minute load average "
             f"{min(loads):.1f}–{max(loads):.1f}", "",
             "| part | " + " | ".join(label for label, _ in trees) + " |", "|---|" + "---|" * len(trees)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{statistics.median(r[name] for r in results[label]):.2f} s"
                                                  for label, _ in trees) + " |")
    return lines


# ---- the ledger's own cost -----------------------------------------------------------------------
def part_overhead(args: argparse.Namespace, workdir: Path) -> list[str]:
    from paratrain.goodput import ledger

    calls = 200_000
    active = ledger.open_ledger(workdir / "ledger")
    (workdir / "ledger").mkdir(exist_ok=True)
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            ledger.step_done()
        rounds.append((time.perf_counter() - started) / calls)
    ledger.close_ledger()
    empty = []
    for _ in range(5):  # the same loop calling a function that does nothing
        started = time.perf_counter()
        for _ in range(calls):
            _nothing()
        empty.append((time.perf_counter() - started) / calls)
    cost = statistics.median(rounds) - statistics.median(empty)
    lines = [f"## the ledger's own cost: {statistics.median(rounds) * 1e6:.2f} µs per step_done() "
             f"({cost * 1e6:.2f} µs above an empty call; {active.attempt} attempt, flushes about once a second included)"]
    for name, step_s in (("digits, 2 processes", args.digits_step), ("text-cls, 2 processes", args.text_step)):
        if step_s:
            lines.append(f"- {name}: step {step_s:.1f} ms → ledger {statistics.median(rounds) / (step_s / 1000):.4%} of a step")
    return lines


def _nothing() -> None:
    pass


# ---- part 2: the soak ----------------------------------------------------------------------------
KINDS = ("kill-worker", "kill-group", "sigterm")


def soak_command(out: Path, steps: int, save: list[str]) -> list[str]:
    # batches of 2 per process: 360 steps an epoch (a fixed interval of 360 is the epoch-end save's)
    return [sys.executable, "-m", "paratrain", "train", "digits", "--nproc-per-node", "2", "--max-steps", str(steps),
            "--batch-size", "2",
            "--max-restarts", "1000", "--no-eval-per-epoch", "--log-every", "500", "--keep-last", "2",
            "--no-tensorboard", "--no-progress", "--out", str(out), *save]


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def soak(name: str, command: list[str], mtbf: float, rng: random.Random, log: Path, ledger_file: Path) -> dict:
    """Run ``command`` until it succeeds, injecting faults at exponential gaps; the outside clock. Faults begin
    once the fresh run's ledger exists: a fresh run's first launch killed before its rank 0 opened the ledger
    leaves no record (later launches note their start in it), so the comparison with the outside clock starts
    from a run that has one."""
    faults: dict[str, int] = {}
    runs = 0
    injected: list[list] = []  # [time, kind] of each fault, for reading the ledger's attempts against them
    start = time.time()
    load = LoadSampler()
    next_fault = float("inf")  # the first fault comes once the run's ledger exists (see the docstring)
    while True:
        runs += 1
        with open(log, "a") as console:
            process = subprocess.Popen(command, env=_env(), stdout=console, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        try:
            while process.poll() is None:
                if next_fault == float("inf") and ledger_file.is_file():
                    next_fault = time.time() + rng.expovariate(1 / mtbf)
                if time.time() >= next_fault:
                    kind = rng.choice(KINDS)
                    if kind == "kill-worker":
                        workers = [p for p in psutil.Process(process.pid).children(recursive=True)
                                   if "paratrain.cli.workers.train" in " ".join(p.cmdline())]
                        if not workers:
                            next_fault = time.time() + 0.5
                            continue
                        rng.choice(workers).kill()
                    elif kind == "kill-group":
                        _kill_group(process.pid)
                    else:
                        process.send_signal(signal.SIGTERM)
                    faults[kind] = faults.get(kind, 0) + 1
                    injected.append([time.time(), kind])
                    next_fault = time.time() + rng.expovariate(1 / mtbf)
                load.sample()
                time.sleep(0.05)
        finally:  # also when this benchmark is interrupted: the job's session is its own, nothing else ends it
            _kill_group(process.pid)  # nothing of a killed job may outlive it
        if process.returncode == 0:
            break
    return {"name": name, "outside": time.time() - start, "runs": runs, "faults": faults, "load": load.summary(),
            "injected": injected}


class LoadSampler:
    """The machine's 1-minute load average, read every ``every`` seconds while a soak runs (the soaks share
    the machine with other work: their numbers move with it)."""

    def __init__(self, every: float = 5.0):
        self.every, self.values, self._next = every, [], 0.0

    def sample(self) -> None:
        if time.monotonic() >= self._next:
            self.values.append(os.getloadavg()[0])
            self._next = time.monotonic() + self.every

    def summary(self) -> list[float]:
        """``[mean, min, max]`` of the samples (NaN without any)."""
        if not self.values:
            return [float("nan")] * 3
        return [statistics.fmean(self.values), min(self.values), max(self.values)]


def _final_weights(out: Path) -> bytes:
    sys.path.insert(0, str(SRC))
    from paratrain.checkpoint import catalog

    path, _ = catalog.complete(out / "checkpoints")[-1]
    return (path / "model.safetensors").read_bytes()


def soak_configs(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """``(name, flags)`` of each configuration in ``--configs``, in its order; ``--warm-workers`` adds the flag to each."""
    known = {"foreground": ("foreground, every %d" % args.fixed, ["--save-every", str(args.fixed), "--no-background-save"]),
             "background": ("background, every %d" % args.fixed, ["--save-every", str(args.fixed)]),
             "auto": ("background, auto", ["--save-every", "auto", "--mtbf", str(args.mtbf)]),
             "auto-warm": ("background, auto, warm workers", ["--save-every", "auto", "--mtbf", str(args.mtbf),
                                                               "--warm-workers"])}
    unknown = [key for key in args.configs if key not in known]
    if unknown:
        raise SystemExit(f"--configs {','.join(unknown)}: not a configuration; choose from {', '.join(known)}")
    chosen = [known[key] for key in args.configs]
    if args.warm_workers:
        chosen = [(name if "warm" in name else f"{name}, warm workers",
                   flags if "--warm-workers" in flags else [*flags, "--warm-workers"]) for name, flags in chosen]
    return chosen


def reference_run(reference: Path, steps: int, run) -> float:
    """The uninterrupted run's wall seconds (by its ledger): ``run()`` makes it in ``reference`` unless a
    complete one of ``steps`` steps is there already (``--reference``: made earlier, alone or beside another job)."""
    from paratrain.checkpoint import catalog
    from paratrain.goodput import accounting

    done = (reference / "checkpoints").is_dir() and catalog.complete(reference / "checkpoints")
    if not done or done[-1][1].step != steps:
        if reference.exists() and any(reference.iterdir()):
            raise SystemExit(f"--reference {reference}: not a finished run of {steps} steps; remove it or name another folder")
        run()
    return accounting.account(_records(reference)).wall


def part_soak(args: argparse.Namespace, workdir: Path) -> list[str]:
    """The uninterrupted run first (or, with ``--reference-alongside``, beside the first configuration: it then
    shares the machine with it), then each configuration under faults, compared with it."""
    reference = Path(args.reference).resolve() if args.reference else workdir / "reference"
    alongside = None
    if args.reference_alongside:
        with open(workdir / "reference.log", "a") as console:
            alongside = subprocess.Popen(soak_command(reference, args.soak_steps, []), env=_env(), stdout=console,
                                         stderr=subprocess.STDOUT, start_new_session=True)
    else:
        ideal = reference_run(reference, args.soak_steps, lambda: subprocess.run(
            soak_command(reference, args.soak_steps, []), env=_env(), check=True, capture_output=True))
        print(f"reference: {args.soak_steps} steps uninterrupted in {ideal:.0f} s (its ledger), {reference}", flush=True)
    configs = soak_configs(args)
    if alongside is not None and not configs:
        raise SystemExit("--reference-alongside runs the uninterrupted run beside the first configuration: name one in --configs")
    rows = []
    for index, (name, flags) in enumerate(configs):
        out = workdir / f"soak-{index}"
        result = soak(name, soak_command(out, args.soak_steps, flags), args.mtbf, random.Random(args.seed),
                      workdir / f"soak-{index}.log", out / "checkpoints" / "goodput.jsonl")
        if alongside is not None:
            if alongside.wait(timeout=3600) != 0:
                raise SystemExit(f"the uninterrupted run failed (exit {alongside.returncode}): see {workdir / 'reference.log'}")
            ideal = reference_run(reference, args.soak_steps, lambda: None)
            print(f"reference (beside {configs[0][0]}): {args.soak_steps} steps uninterrupted in {ideal:.0f} s "
                  f"(its ledger), {reference}", flush=True)
            alongside = None
        rows.append(accounted(result, out, reference, workdir / f"soak-{index}.png", name))
    lines = [f"## goodput soak: digits, 2 processes, {args.soak_steps} steps, failures every {args.mtbf:.0f} s on "
             f"average (seed {args.seed}); an uninterrupted run took {ideal:.0f} s (its ledger)", "", *soak_table(rows)]
    lines.append(f"\ntimelines: {workdir}/soak-*.png")
    return lines


def accounted(result: dict, out: Path, reference: Path, png: Path, title: str) -> dict:
    """A soak's ``result`` with the run's ledger, goodput by both clocks, and whether its final weights equal the
    uninterrupted run's in ``reference``; its timeline drawn to ``png``. Printed as one JSON line."""
    from paratrain.goodput import accounting, timeline

    run = accounting.account(_records(out))
    timeline.draw(run, png, title=f"{title}: goodput {run.goodput:.1%}")
    result.update(ledger=run.to_dict(), identical=_final_weights(out) == _final_weights(reference),
                  goodput=run.goodput, outside_goodput=run.seconds["train"] / result["outside"], ledger_wall=run.wall)
    print(json.dumps(result), flush=True)
    return result


def soak_table(rows: list[dict]) -> list[str]:
    """The soaks as a markdown table, one row per configuration (with its node launches where it has them)."""
    launches = any("launches" in r for r in rows)
    lines = ["| saves | wall (outside) | ledger wall | faults |" + (" node launches |" if launches else "")
             + " goodput (ledger) | goodput (outside clock) | start-up | redone | save blocking | evaluation | the rest "
             "| recovery | load average: mean (min–max) | bit-identical |",
             "|---" * (14 + launches) + "|"]
    for r in rows:
        s, wall = r["ledger"]["seconds"], r["ledger_wall"]
        faults = ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items())) or "none"
        mean, low, high = r.get("load", [float("nan")] * 3)
        lines.append(f"| {r['name']} | {r['outside']:.0f} s | {wall:.0f} s | {faults} | "
                     + (f"{r['launches']} | " if launches else "")
                     + f"{r['goodput']:.1%} | {r['outside_goodput']:.1%} | {s.get('startup', 0.0) / wall:.1%} | "
                     f"{s.get('redone', 0.0) / wall:.1%} | {s.get('save', 0.0) / wall:.1%} | {s.get('eval', 0.0) / wall:.1%} | "
                     f"{s.get('rest', 0.0) / wall:.1%} | {s.get('recovery', 0.0) / wall:.1%} | "
                     f"{mean:.1f} ({low:.1f}–{high:.1f}) | {'yes' if r['identical'] else 'NO'} |")
    return lines


def main() -> int:
    if sys.argv[1:2] == ["--startup-worker"]:
        return startup_worker(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("cost", "soak", "overhead", "startup", "fault-cost"), required=True)
    parser.add_argument("--train", type=float, default=3.0, help="--part fault-cost: seconds a job trains before a fault")
    parser.add_argument("--digits-step", type=float, default=None, help="--part overhead: a digits step in ms")
    parser.add_argument("--text-step", type=float, default=None, help="--part overhead: a text-cls step in ms")
    parser.add_argument("--task", default="text-cls")
    parser.add_argument("--nproc", type=int, default=2, help="--part cost: processes of each run (1: a core left free "
                        "for the writing thread, as on a GPU host whose cores do not all train)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="none,foreground,background", help="--part cost: which runs (comma-separated)")
    parser.add_argument("--strategy", default="auto", help="--part cost: paratrain train's --strategy (fsdp: sharded "
                        "checkpoints, DCP shards written by every rank)")
    parser.add_argument("--baseline-src", default=None, help="--part cost: also run each mode with the paratrain of this "
                        "src folder (e.g. an earlier commit's, from git archive), interleaved with this tree's")
    parser.add_argument("--mtbf", type=float, default=60.0)
    parser.add_argument("--soak-steps", type=int, default=12000)
    parser.add_argument("--fixed", type=int, default=360, help="the fixed interval of the first two configurations "
                        "(the fit loop also saves at every epoch's end: 360 steps here)")
    parser.add_argument("--configs", default="foreground,background,auto", help="--part soak: which configurations "
                        "(comma-separated: foreground and background at --fixed, auto, auto-warm: auto with "
                        "--warm-workers)")
    parser.add_argument("--warm-workers", action="store_true", help="--part soak: every configuration with --warm-workers")
    parser.add_argument("--reference", default=None, help="--part soak: the uninterrupted run's folder; one of "
                        "--soak-steps steps already there is used (made earlier, e.g. with --configs ''), else it is "
                        "run there first")
    parser.add_argument("--reference-alongside", action="store_true", help="--part soak: run the uninterrupted run "
                        "beside the first configuration instead of before the soak (it shares the machine with it)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", default=None, help="a folder to keep the runs in (default: a temporary one)")
    args = parser.parse_args()
    sys.path.insert(0, str(SRC))
    args.modes, args.configs = args.modes.split(","), [key for key in args.configs.split(",") if key]
    with tempfile.TemporaryDirectory(prefix="paratrain-goodput-") as scratch:
        workdir = Path(args.keep or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        lines = {"cost": part_cost, "soak": part_soak, "overhead": part_overhead,
                 "startup": part_startup, "fault-cost": part_fault_cost}[args.part](args, workdir)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
