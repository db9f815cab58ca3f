"""What does the periodic weight-consistency check cost next to a training step?

Runs 2 processes (ddp, gloo) per built-in task, alternating blocks of training steps
and blocks of ``rt.check_same_weights`` calls in the same job, and prints the check's
cost as a fraction of one step, and the overhead at ``check_sync_every=N``:
overhead(N) = check time / (N × step time). The fit loop's default N is the smallest
round number whose overhead stays below 0.5 % for every task measured.

    python benchmarks/check_sync_cost.py [--tasks digits text-cls] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import paratrain as pt
from step_blocks import recipe_training, seconds_per_step  # benchmarks/step_blocks.py

BLOCK = 10  # steps (or checks) timed together


def measure(task_name: str, rounds: int) -> dict:
    """In every worker: median seconds per training step and per check, alternating blocks."""
    rt = pt.Runtime(strategy="ddp", seed=0)
    task, model, optimizer, batches = recipe_training(rt, task_name)

    def train_block() -> float:
        return seconds_per_step(rt, task, model, optimizer, batches, BLOCK)

    def check_block() -> float:
        start = time.perf_counter()
        for _ in range(BLOCK):
            rt.check_same_weights(model)
        pt.barrier()
        return (time.perf_counter() - start) / BLOCK

    train_block()  # warm-up
    steps, checks = [], []
    for _ in range(rounds):
        steps.append(train_block())
        checks.append(check_block())
    params = sum(p.numel() for p in model.parameters())
    tensors = len(list(model.parameters())) + len(list(model.buffers()))
    rt.close()
    return {"task": task_name, "step_s": statistics.median(steps), "check_s": statistics.median(checks),
            "parameters": params, "tensors": tensors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["digits", "text-cls"])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'task':<10} {'params':>9} {'tensors':>7} {'step ms':>8} {'check ms':>9} {'check/step':>10} "
          f"{'N=10':>7} {'N=100':>7} {'N=500':>7}")
    needed = 1
    for name in args.tasks:
        r = pt.spawn(measure, nprocs=2, args=(name, args.rounds))
        ratio = r["check_s"] / r["step_s"]
        needed = max(needed, ratio / 0.005)
        print(f"{name:<10} {r['parameters']:>9} {r['tensors']:>7} {1000 * r['step_s']:>8.2f} {1000 * r['check_s']:>9.3f} "
              f"{ratio:>10.3f} " + " ".join(f"{100 * ratio / n:>6.3f}%" for n in (10, 100, 500)))
    print(f"smallest check_sync_every with overhead < 0.5% on every task: {int(needed) + 1}")


if __name__ == "__main__":
    main()
