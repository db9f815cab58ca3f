"""Gradient accumulation under DDP: one all-reduce per optimizer step, and what that saves.

Two processes (ddp, gloo) train the same model with ``rt.accumulate(model, steps=k)``
for k = 1 and k = 4 at the same micro-batch size, alternating ``--rounds`` times. For
each k the table gives:

* the all-reduces torch ran, counted by ``torch.profiler`` (``c10d::allreduce_`` events:
  one per DDP gradient bucket), per optimizer step and per micro-batch — with k = 4
  DDP's ``no_sync`` must leave 3 of 4 micro-batches without communication, so the count
  per step stays the bucket count and the count per micro-batch falls to a quarter;
* samples/s over the same number of micro-batches, and the time k = 4 saves per sample.

    python benchmarks/grad_accumulation.py [--task text-cls] [--micro-batches 48] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

import paratrain as pt
from paratrain.data.batches import move_to
from paratrain.tasks.api import TaskOptions
from paratrain.tasks.registry import create_task

ACCUMULATIONS = (1, 4)


def count_all_reduces(events) -> int:
    return sum(event.count for event in events if event.key == "c10d::allreduce_")


def measure(task_name: str, micro_batches: int, rounds: int) -> dict:
    torch.set_num_threads(1)
    rt = pt.Runtime(strategy="ddp", seed=0)
    task = create_task(task_name, TaskOptions(limit_train=4096, limit_eval=64))
    train, _ = task.datasets()
    model = task.build_model()
    model, optimizer = rt.setup(model, task.build_optimizer(model, 1e-3, 0.01))
    loader = rt.loader(train, task.recipe.batch_size, shuffle=True, collate_fn=task.collate)
    batches = [move_to(batch, rt.device) for _, batch in zip(range(micro_batches), loader)]

    def run(k: int) -> float:
        pt.barrier()
        start = time.perf_counter()
        for batch in batches:
            with rt.accumulate(model, steps=k):
                loss, _ = task.forward(model, batch)
                rt.backward(loss)
                rt.step(optimizer)
        pt.barrier()
        return time.perf_counter() - start

    run(1)  # warm-up: DDP builds its buckets on the first synchronising step
    counts = {}
    for k in ACCUMULATIONS:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(k)
        counts[k] = count_all_reduces(prof.key_averages())
    seconds: dict[int, list[float]] = {k: [] for k in ACCUMULATIONS}
    for r in range(rounds):
        for k in ACCUMULATIONS if r % 2 == 0 else ACCUMULATIONS[::-1]:
            seconds[k].append(run(k))
    samples = micro_batches * len(batches[0]["labels"]) * pt.world_size()
    rt.close()
    return {"counts": counts, "sps": {k: samples / statistics.median(v) for k, v in seconds.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="text-cls")
    parser.add_argument("--micro-batches", type=int, default=48, help="a multiple of 4")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    r = pt.spawn(measure, nprocs=2, args=(args.task, args.micro_batches, args.rounds))
    print(f"{args.task}, 2 processes (ddp, gloo), {args.micro_batches} micro-batches per run, "
          f"{args.rounds} alternating rounds, load average {os.getloadavg()[0]:.2f}")
    print(f"{'k':>3} {'optimizer steps':>16} {'all-reduces':>12} {'per step':>9} {'per micro-batch':>16} {'samples/s':>10}")
    for k in ACCUMULATIONS:
        steps = args.micro_batches // k
        print(f"{k:>3} {steps:>16} {r['counts'][k]:>12} {r['counts'][k] / steps:>9.2f} "
              f"{r['counts'][k] / args.micro_batches:>16.3f} {r['sps'][k]:>10.1f}")
    print(f"k=4 vs k=1: {r['sps'][4] / r['sps'][1]:.3f}x samples/s "
          f"({100 * (1 - r['sps'][1] / r['sps'][4]):.1f} % less time per sample)")


if __name__ == "__main__":
    main()
