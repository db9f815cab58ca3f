"""What do the per-rank step timings behind the straggler detector cost a training step?

Runs 2 processes (ddp, gloo) per built-in task and alternates, in the same job, blocks of steps with the
fit loop's phase clock running (a ``perf_counter`` read at each phase mark, a hook per parameter that
stamps its gradient) and blocks without it; prints the median wall and CPU time per step of each and
the difference. Also the log line's collective: an all-gather of six numbers (loss and timings) against
the all-reduce of the loss it replaces, per step at ``--log-every`` 50.

    python benchmarks/straggler_cost.py [--tasks digits text-cls] [--rounds 7] [--block 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import paratrain as pt
from paratrain import comm
from paratrain.diagnostics import watchdog
from paratrain.diagnostics.step_phases import PhaseClock
from paratrain.data.batches import move_to
from step_blocks import Replay, recipe_training  # benchmarks/step_blocks.py

LOG_EVERY = 50


def block(rt, task, model, optimizer, batches, steps: int) -> tuple[float, float]:
    """``steps`` steps marked as the fit loop marks them; (wall, cpu) seconds per step. Collective."""
    pt.barrier()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(steps):
        watchdog.mark("data")
        batch = move_to(batches.next(), rt.device)
        watchdog.mark("forward")
        loss, _ = task.forward(model, batch)
        rt.backward(loss)
        rt.step(optimizer)
    pt.barrier()
    return (time.perf_counter() - start) / steps, (time.process_time() - cpu_start) / steps


def collective(fn, calls: int = 50) -> float:
    pt.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def clock_work_s(parameters: int, steps: int = 20_000) -> float:
    """The clock's own work for one step, alone: the fit loop's phase marks and one gradient stamp per
    parameter tensor (the upper bound of what it adds, free of the noise of a shared machine)."""
    clock = PhaseClock().start()
    try:
        start = time.perf_counter()
        for _ in range(steps):
            for phase in ("data", "forward", "backward", "optimizer", "logging", "device", "paused"):
                watchdog.mark(phase)
            for _ in range(parameters):
                clock._gradient_ready(None)
        return (time.perf_counter() - start) / steps
    finally:
        clock.stop()


def measure(task_name: str, rounds: int, steps: int) -> dict:
    rt = pt.Runtime(strategy="ddp", seed=0)
    task, model, optimizer, source = recipe_training(rt, task_name)
    batches = Replay.take(source, 8)
    off, on = [], []
    block(rt, task, model, optimizer, batches, steps)  # warm-up
    for _ in range(rounds):
        off.append(block(rt, task, model, optimizer, batches, steps))
        clock = PhaseClock()
        clock.watch(model)
        clock.start()
        on.append(block(rt, task, model, optimizer, batches, steps))
        clock.stop()
    loss = torch.tensor(1.0, dtype=torch.float64)
    six = torch.ones(6, dtype=torch.float64)
    reduce_s = statistics.median(collective(lambda: comm.all_reduce(loss, op="mean")) for _ in range(3))
    gather_s = statistics.median(collective(lambda: comm.all_gather_rows(six)) for _ in range(3))
    rt.close()
    median = lambda values, i: statistics.median(v[i] for v in values)  # noqa: E731
    tensors = len(list(model.parameters()))
    return {"task": task_name, "off": (median(off, 0), median(off, 1)), "on": (median(on, 0), median(on, 1)),
            "alone_s": clock_work_s(tensors),
            "reduce_s": reduce_s, "gather_s": gather_s, "parameters": len(list(model.parameters()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["digits", "text-cls"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block", type=int, default=20, help="steps per timed block")
    args = parser.parse_args()
    print(f"{'task':<9} {'tensors':>7} {'step ms off':>11} {'on':>8} {'wall +':>7} {'cpu ms off':>10} {'on':>8} "
          f"{'cpu +':>7} {'clock µs':>8} {'of step':>7} {'log collective +µs':>18} {'per step':>8}")
    for name in args.tasks:
        r = pt.spawn(measure, nprocs=2, args=(name, args.rounds, args.block))
        (wall_off, cpu_off), (wall_on, cpu_on) = r["off"], r["on"]
        extra = r["gather_s"] - r["reduce_s"]
        print(f"{name:<9} {r['parameters']:>7} {1e3 * wall_off:>11.2f} {1e3 * wall_on:>8.2f} "
              f"{100 * (wall_on / wall_off - 1):>6.2f}% {1e3 * cpu_off:>10.2f} {1e3 * cpu_on:>8.2f} "
              f"{100 * (cpu_on / cpu_off - 1):>6.2f}% {1e6 * r['alone_s']:>8.1f} {100 * r['alone_s'] / wall_off:>6.3f}% "
              f"{1e6 * extra:>18.1f} {100 * extra / LOG_EVERY / wall_off:>7.3f}%")


if __name__ == "__main__":
    main()
