"""What does the Runtime's own hang watchdog cost per training step?

Two processes (ddp, gloo, under pt.spawn, so the watchdog is on as in every job) train a
built-in task. The same job runs many rounds of two adjacent blocks of steps on the same
batches, one with the watchdog running and one with it suspended (its thread idle, the
progress marks of rt.backward and rt.step going nowhere; the batches are drawn from rt.loader
before the round, so its mark is left to the figure below), in an order drawn anew for every
round. Each rank times every block twice: by the wall clock, and by its own CPU time
(time.process_time: all of its threads, the watchdog's included). The paired differences
(running minus suspended, the two blocks of one round, both ranks) give a median, its
quartiles and a bootstrap 95 % interval of the median, as a share of the median suspended
step. On a machine shared with other jobs the wall-clock pairs spread widely; the CPU pairs
much less, since time spent waiting for a core is not CPU time of this process.

The cost itself, free of that noise: the marks one step makes (four: a batch, backward, the
optimizer step, after it), timed alone, plus the CPU time of the watchdog's own threads during
the running blocks (each thread's CPU clock, time.pthread_getcpuclockid) per step. Their sum,
as a share of the suspended step's CPU time, is the figure to compare with a budget; the
paired differences above must agree with it within their interval. Also shown: one
publication (the watchdog thread's work every poll), timed in the job.

    python benchmarks/watchdog_cost.py [--task text-cls] [--rounds 30] [--block STEPS] [--stall-timeout S]

``--stall-timeout`` (default: the process group's timeout, as in a job) sets how often the
watchdog publishes (a tenth of it, 0.5–10 s): a small one shows the publication's share too.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time

import paratrain as pt
from paratrain.diagnostics.watchdog import thread as watchdog  # its _active is set by hand below
from step_blocks import Batches, Replay, recipe_training, times_per_step  # benchmarks/step_blocks.py

MARKS_PER_STEP = 4
PUBLICATIONS = 50
BOOTSTRAP_DRAWS = 2000
BLOCK_S = 3.0  # seconds of steps per timed block, unless --block says how many steps


def marks_cost_s(calls: int = 200_000) -> float:
    """CPU seconds of the progress marks of one step, on a running watchdog (no thread started)."""
    dog = watchdog.Watchdog(600, rank=0, world_size=1)
    watchdog._active = dog
    start = time.process_time()  # CPU time: other jobs taking the cores do not inflate it
    for _ in range(calls // MARKS_PER_STEP):
        watchdog.mark("forward")
        watchdog.mark("backward")
        watchdog.mark("optimizer")
        watchdog.mark("logging")
    watchdog._active = None
    return (time.process_time() - start) / (calls // MARKS_PER_STEP)


def watchdog_threads_cpu_s() -> float:
    """CPU seconds used so far by this process's watchdog threads (each thread's own CPU clock)."""
    return sum(time.clock_gettime(time.pthread_getcpuclockid(t.ident)) for t in threading.enumerate()
               if t.name.startswith("paratrain-watchdog") and t.ident is not None)


def measure(task_name: str, rounds: int, block: int | None, stall_timeout: float | None) -> list[dict]:
    """In every worker: per round, (wall, cpu) seconds per step with the watchdog running and
    suspended; every rank's lists (rank 0 returns them all). Collective."""
    import torch.distributed as dist

    rt = pt.Runtime(strategy="ddp", seed=0, stall_timeout=stall_timeout)
    dog = rt._watchdog
    assert dog is not None, "the Runtime started no watchdog: run under pt.spawn / paratrain run"
    task, model, optimizer, batches = recipe_training(rt, task_name)

    def timed_block(watching: bool, steps: int, data: Batches | Replay = batches) -> tuple[float, float]:
        dog._suspended = not watching  # suspended: its thread publishes nothing, marks go nowhere
        watchdog._active = dog if watching else None
        return times_per_step(rt, task, model, optimizer, data, steps)

    timed_block(True, 2)  # warm-up, both ways
    step_s = timed_block(False, 2)[0]
    if block is None:  # blocks of about BLOCK_S: a short step (digits) needs many per block
        shared = [max(2, round(BLOCK_S / step_s))]
        dist.broadcast_object_list(shared, src=0)  # every rank runs the same number of steps
        block = shared[0]
    order = random.Random(0)  # the same draws on every rank: both run or suspend their watchdog together
    on, off = [], []
    threads_cpu_s = 0.0  # the watchdog's threads' own CPU time during the running blocks
    for _ in range(rounds):
        first = order.random() < 0.5
        times = {}
        same_data = Replay.take(batches, block)  # both blocks of a round train on the same batches
        for watching in (first, not first):
            before = watchdog_threads_cpu_s()
            times[watching] = timed_block(watching, block, Replay(same_data.batches))
            if watching:
                threads_cpu_s += watchdog_threads_cpu_s() - before
        on.append(times[True])
        off.append(times[False])
    timed_block(True, 2)
    # One publication, as the thread makes it every poll: this rank's record and the store round trip.
    start = time.perf_counter()
    for tick in range(PUBLICATIONS):
        dog._exchange(dog._beat(tick))
    mine = {"rank": rt.rank, "block": block, "on": on, "off": off, "poll_s": dog.poll,
            "threads_cpu_s": threads_cpu_s / (rounds * block),
            "publication_s": (time.perf_counter() - start) / PUBLICATIONS}
    everyone: list = [None] * rt.world_size
    dist.all_gather_object(everyone, mine)
    rt.close()
    return everyone


def paired_cost(ranks: list[dict], clock: int) -> dict:
    """The paired differences of one clock (0: wall, 1: cpu) over all ranks and rounds: median,
    quartiles, a bootstrap 95 % interval of the median, and the median suspended step."""
    diffs = [on[clock] - off[clock] for r in ranks for on, off in zip(r["on"], r["off"])]
    base = statistics.median(off[clock] for r in ranks for off in r["off"])
    draw = random.Random(1)
    medians = sorted(statistics.median(draw.choices(diffs, k=len(diffs))) for _ in range(BOOTSTRAP_DRAWS))
    q1, _, q3 = statistics.quantiles(diffs, n=4)
    return {"median": statistics.median(diffs), "q1": q1, "q3": q3, "base": base, "pairs": len(diffs),
            "low": medians[int(0.025 * BOOTSTRAP_DRAWS)], "high": medians[int(0.975 * BOOTSTRAP_DRAWS) - 1]}


def describe(name: str, cost: dict) -> str:
    share = 100 / cost["base"]
    return (f"{name}: suspended step {1000 * cost['base']:.2f} ms; paired difference (running - suspended, "
            f"{cost['pairs']} pairs) median {1000 * cost['median']:+.3f} ms = "
            f"{share * cost['median']:+.3f} % of a step, "
            f"quartiles {share * cost['q1']:+.2f} .. {share * cost['q3']:+.2f} %, "
            f"95 % interval of the median {share * cost['low']:+.3f} .. {share * cost['high']:+.3f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="text-cls")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=None, help=f"steps per timed block (default: about {BLOCK_S:g}s)")
    parser.add_argument("--stall-timeout", type=float, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    marks = marks_cost_s()
    ranks = pt.spawn(measure, nprocs=2, args=(args.task, args.rounds, args.block, args.stall_timeout))
    load_after = os.getloadavg()
    cpu, wall = paired_cost(ranks, 1), paired_cost(ranks, 0)
    poll = ranks[0]["poll_s"]
    publication = statistics.median(r["publication_s"] for r in ranks)
    print(f"task {args.task}, 2 processes, ddp, gloo; {args.rounds} rounds of 2 blocks of {ranks[0]['block']} steps; "
          f"watchdog publishes every {poll:g}s; load average (1 min) {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after, on {os.cpu_count()} cores")
    print(describe("CPU time per step", cpu))
    print(describe("wall clock per step", wall))
    threads = statistics.mean(r["threads_cpu_s"] for r in ranks)
    print(f"progress marks of one step: {1e6 * marks:.2f} µs ({100 * marks / cpu['base']:.4f} % of a step's CPU time)")
    print(f"the watchdog's threads (their own CPU clocks, running blocks): {1e6 * threads:.2f} µs per step "
          f"({100 * threads / cpu['base']:.4f} % of a step's CPU time)")
    print(f"the watchdog's cost, marks + its threads: {100 * (marks + threads) / cpu['base']:.4f} % "
          "of a step's CPU time")
    print(f"one publication (record + store round trip, in the watchdog's thread): {1000 * publication:.2f} ms "
          f"every {poll:g}s ({100 * publication / poll:.3f} % of one core)")


if __name__ == "__main__":
    main()
