"""What does one training step cost in CPU time and Python calls, per bench method?

Wall-clock samples/s on a shared machine moves with everybody else's work; the CPU
time a process spends per step and the Python calls it makes per step do not (much).
This runs the bench's own method scripts (``paratrain_loop.py`` for ``single`` and
``ddp``, ``accelerate_script.py``, ``fabric_script.py``, …) on the bench's workload,
each launched as the bench launches it, and measures in every rank, over the steps
after ``--warmup`` (the bench's ``StepRecorder.step`` marks them, in every script):

* CPU seconds per step: ``time.process_time()`` (all threads of the process: Python,
  intra-op threads, gloo's threads), and wall seconds per step beside it;
* Python function calls per step (``cProfile``), and the functions paratrain's loop
  calls that the peer does not, by calls per step;
* with ``--ops``, torch operators per step (``torch.profiler``), instead of cProfile;
* each thread's CPU time per step (from ``/proc``: the main thread, gloo's threads, …), and
  every rank of Fabric too (it starts its other ranks itself: they run this file as well).

``--cpu-binding none`` runs ``paratrain run``'s methods without their CPU shares
(``paratrain.env.cpu_binding``), to measure what the binding changes.

    python benchmarks/step_profile.py --task digits --methods ddp,accelerate --steps 200
    python benchmarks/step_profile.py --task text-cls --methods single,ddp,accelerate --steps 60 --top 25
    python benchmarks/step_profile.py --task text-cls --methods ddp --steps 140 --cpu-binding none

Results go to runs/step-profile-TASK/ (one folder per method with each rank's figures).
The launched script runs under ``python step_profile.py --child SCRIPT SPEC``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import runpy
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def child(script: str, spec_file: str) -> None:
    """Run ``script SPEC`` as its launcher would, measuring the steps after the warm-up."""
    from paratrain.bench import record
    from paratrain.bench.spec import BenchSpec

    spec = BenchSpec.load(spec_file)
    warmup = int(os.environ["STEP_PROFILE_WARMUP"])
    ops = os.environ.get("STEP_PROFILE_OPS") == "1"
    state: dict = {"steps": 0}
    profiler = cProfile.Profile()
    original = record.StepRecorder.step

    def step(self, loss):
        original(self, loss)
        state["steps"] += 1
        n = state["steps"]
        if n == warmup:
            state.update(cpu=time.process_time(), wall=time.perf_counter(), threads=_thread_cpu(),
                         migrations=_migrations())
            if ops:
                import torch.profiler

                state["torch"] = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                state["torch"].__enter__()
            else:
                profiler.enable()
        elif n == spec.steps:
            if ops:
                state["torch"].__exit__(None, None, None)
            else:
                profiler.disable()
            measured = n - warmup
            out = Path(spec.work_dir) / f"profile{self.record.rank}"
            import torch

            figures = {"rank": self.record.rank, "steps": measured, "threads": torch.get_num_threads(),
                       "cpu_s_per_step": (time.process_time() - state["cpu"]) / measured,
                       "wall_s_per_step": (time.perf_counter() - state["wall"]) / measured,
                       "process_cpu_s": time.process_time(),  # this rank's whole CPU time so far
                       "thread_cpu_ms_per_step": _thread_cpu_per_step(state["threads"], _thread_cpu(), measured),
                       "main_migrations_per_step": (_migrations() - state["migrations"]) / measured}
            if ops:
                events = state["torch"].key_averages()
                figures["ops_per_step"] = sum(e.count for e in events) / measured
                figures["ops"] = {e.key: e.count / measured for e in events}
            else:
                stats = pstats.Stats(profiler)
                figures["calls_per_step"] = stats.total_calls / measured
                figures["functions"] = {f"{Path(f).name}:{line}({name})": v[1] / measured
                                        for (f, line, name), v in stats.stats.items()}
            out.with_suffix(".json").write_text(json.dumps(figures), encoding="utf-8")

    record.StepRecorder.step = step
    _children_under_profile(script, spec_file)
    sys.argv = [script, spec_file]
    runpy.run_path(script, run_name="__main__")


def _thread_cpu() -> dict[str, tuple[str, float]]:
    """CPU seconds so far of each thread of this process, by thread id: (name, seconds)."""
    tick = os.sysconf("SC_CLK_TCK")
    threads = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        threads[task.name] = (name, (int(fields[11]) + int(fields[12])) / tick)  # utime, stime
    return threads


def _migrations() -> int:
    """How often the scheduler has moved this (main) thread to another CPU; 0 where Linux does not say."""
    try:
        for line in Path(f"/proc/self/task/{os.getpid()}/sched").read_text().splitlines():
            if line.startswith("se.nr_migrations"):
                return int(line.split(":")[1])
    except (OSError, ValueError):
        pass
    return 0


def _thread_cpu_per_step(before: dict, after: dict, steps: int) -> dict[str, float]:
    """CPU ms per step of each thread over the window, summed by thread name (the main thread apart)."""
    main = str(os.getpid())
    spent: dict[str, float] = {}
    for tid, (name, seconds) in after.items():
        key = "main" if tid == main else name
        spent[key] = spent.get(key, 0.0) + (seconds - before.get(tid, (name, 0.0))[1]) * 1e3 / steps
    return {k: round(v, 3) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}


def _children_under_profile(script: str, spec_file: str) -> None:
    """Fabric starts its other ranks itself, by running ``sys.argv`` again: have them run
    this file in ``--child`` mode too, so that every rank is measured, not rank 0 alone."""
    try:
        from lightning.fabric.strategies.launchers import subprocess_script
    except ImportError:
        return
    subprocess_script._basic_subprocess_cmd = lambda: [sys.executable, str(HERE), "--child", script, spec_file]


def parent(args: argparse.Namespace) -> None:
    import torch

    from paratrain.tasks import task_ref
    from paratrain.bench.methods import METHODS
    from paratrain.bench.record import save_weights
    from paratrain.bench.settings import method_env
    from paratrain.bench.spec import BenchSpec
    from paratrain.tasks.api import TaskOptions

    if args.extra_path:
        sys.path.append(args.extra_path)
    out = Path(args.out or f"runs/step-profile-{args.task}").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    task = task_ref.resolve_task(args.task, TaskOptions())
    task.datasets()  # text-cls builds its vocabulary from the training data
    torch.manual_seed(args.seed)
    init = out / "init.safetensors"
    save_weights(task.build_model().state_dict(), init)
    spec = BenchSpec(task=args.task, steps=args.steps, global_batch=task.recipe.batch_size * args.nproc, nproc=args.nproc,
                     lr=task.recipe.lr, weight_decay=task.recipe.weight_decay, seed=args.seed, init_weights=str(init))
    results = {}
    for name in args.methods.split(","):
        method = METHODS[name]
        if method.missing():
            print(f"{name}: {method.missing()}")
            continue
        work = out / name
        work.mkdir()
        precision = method.precision("32-true", _Machine())
        spec_file = spec.for_method(name, precision, method.options, work).save(work)
        argv = method.argv(spec_file, args.nproc, precision)
        # The launcher's argv with the script replaced by this file in --child mode.
        script = method.script_path
        at = argv.index(script)
        argv[at:at + 1] = [str(HERE), "--child", script]
        if args.cpu_binding != "auto" and "run" in argv:  # paratrain run's methods (ddp, fsdp, deepspeed)
            argv[argv.index("run") + 1:argv.index("run") + 1] = ["--cpu-binding", args.cpu_binding]
        env = method_env(method.processes(args.nproc))
        env["STEP_PROFILE_WARMUP"] = str(args.warmup)
        env["STEP_PROFILE_OPS"] = "1" if args.ops else "0"
        if args.extra_path:
            env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], args.extra_path])
        started = time.monotonic()
        children_before = _children_cpu()
        proc = __import__("subprocess").run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            print(f"{name}: failed ({proc.returncode}): {proc.stderr[-1500:]}")
            continue
        ranks = [json.loads(p.read_text()) for p in sorted(work.glob("profile*.json"))]
        results[name] = ranks
        # What the launcher and its helpers spent beside the ranks (their whole runs, start-up included).
        tree = _children_cpu() - children_before
        launcher = tree - sum(r["process_cpu_s"] for r in ranks)
        cpu = statistics.mean(r["cpu_s_per_step"] for r in ranks)
        wall = statistics.mean(r["wall_s_per_step"] for r in ranks)
        count = "ops_per_step" if args.ops else "calls_per_step"
        calls = statistics.mean(r[count] for r in ranks)
        print(f"{name:<12} {len(ranks)} ranks × {ranks[0]['threads']} threads · {ranks[0]['steps']} steps · CPU {cpu * 1e3:7.2f} ms/step/rank · "
              f"wall {wall * 1e3:7.2f} ms/step · {calls:8.1f} {count.replace('_', ' ')} · "
              f"launcher and the rest {launcher:5.1f} CPU s of {tree:5.1f} · ({time.monotonic() - started:.0f}s)")
        for r in ranks:
            threads = ", ".join(f"{k} {v:.2f}" for k, v in r["thread_cpu_ms_per_step"].items() if v)
            print(f"{'':13}rank {r['rank']}: CPU {r['cpu_s_per_step'] * 1e3:.2f}, wall {r['wall_s_per_step'] * 1e3:.2f} ms/step"
                  f" · main thread moved to another CPU {r['main_migrations_per_step']:.2f}×/step"
                  f" · by thread (ms/step): {threads}")
    (out / "summary.json").write_text(json.dumps(results), encoding="utf-8")
    if args.ops or len(results) < 2:
        return
    key = "functions"
    names = list(results)
    mine, others = results[names[0]][0][key], [results[n][0][key] for n in names[1:]]
    print(f"\nfunctions {names[0]} (rank 0) calls per step that {', '.join(names[1:])} do not:")
    extra = sorted(((calls, fn) for fn, calls in mine.items() if all(fn not in o for o in others)), reverse=True)
    for calls, fn in extra[:args.top]:
        print(f"  {calls:7.1f}  {fn}")


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _Machine:
    bf16_supported = True


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="digits")
    parser.add_argument("--methods", default="ddp,accelerate")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--ops", action="store_true", help="torch operators per step instead of Python calls")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--cpu-binding", choices=("auto", "none"), default="auto",
                        help="paratrain run's --cpu-binding for the methods it launches")
    parser.add_argument("--extra-path", help="added to the methods' PYTHONPATH (a peer library installed aside)")
    parser.add_argument("--out")
    main_args = parser.parse_args()
    parent(main_args)


if __name__ == "__main__":
    main()
