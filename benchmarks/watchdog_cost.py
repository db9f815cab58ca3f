"""What does the Runtime's own hang watchdog cost per training step?

Two processes (ddp, gloo, under pt.spawn, so the watchdog is on as in every job) train a
built-in task; the same job alternates blocks of steps with the watchdog running and
blocks with it suspended (its thread idle, the progress marks of rt.loader, rt.backward
and rt.step going nowhere), and prints the median step time of each and their difference
as a share of a step. Two figures free of that noise: the time of the marks one step makes
(four: a batch, backward, the optimizer step, after it), measured alone; and the time of one
publication (the watchdog thread's work every poll), measured in the job.

    python benchmarks/watchdog_cost.py [--task text-cls] [--rounds 7] [--stall-timeout S]

``--stall-timeout`` (default: the process group's timeout, as in a job) sets how often the
watchdog publishes (a tenth of it, 0.5–10 s): a small one shows the publication's share too.
"""

from __future__ import annotations

import argparse
import statistics
import time

import paratrain as pt
from paratrain.diagnostics import watchdog
from step_blocks import recipe_training, seconds_per_step  # benchmarks/step_blocks.py

BLOCK = 10  # steps timed together
MARKS_PER_STEP = 4
PUBLICATIONS = 50


def marks_cost_s(calls: int = 200_000) -> float:
    """Seconds of the progress marks of one step, on a running watchdog (no thread started)."""
    dog = watchdog.Watchdog(600, rank=0, world_size=1)
    watchdog._active = dog
    start = time.perf_counter()
    for _ in range(calls // MARKS_PER_STEP):
        watchdog.mark("forward")
        watchdog.mark("backward")
        watchdog.mark("optimizer")
        watchdog.mark("logging")
    watchdog._active = None
    return (time.perf_counter() - start) / (calls // MARKS_PER_STEP)


def measure(task_name: str, rounds: int, stall_timeout: float | None) -> dict:
    """In every worker: median seconds per step with the watchdog running and suspended."""
    rt = pt.Runtime(strategy="ddp", seed=0, stall_timeout=stall_timeout)
    dog = rt._watchdog
    assert dog is not None, "the Runtime started no watchdog: run under pt.spawn / paratrain run"
    task, model, optimizer, batches = recipe_training(rt, task_name)

    def block(watching: bool) -> float:
        dog._suspended = not watching  # suspended: its thread publishes nothing, marks go nowhere
        watchdog._active = dog if watching else None
        return seconds_per_step(rt, task, model, optimizer, batches, BLOCK)

    block(True)  # warm-up
    on, off = [], []
    for _ in range(rounds):
        on.append(block(True))
        off.append(block(False))
    block(True)
    # One publication, as the thread makes it every poll: this rank's record and the store round trip.
    start = time.perf_counter()
    for tick in range(PUBLICATIONS):
        dog._exchange(dog._beat(tick))
    publication_s = (time.perf_counter() - start) / PUBLICATIONS
    rt.close()
    return {"on_s": statistics.median(on), "off_s": statistics.median(off), "poll_s": dog.poll,
            "publication_s": publication_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="text-cls")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--stall-timeout", type=float, default=None)
    args = parser.parse_args()
    marks = marks_cost_s()
    r = pt.spawn(measure, nprocs=2, args=(args.task, args.rounds, args.stall_timeout))
    delta = r["on_s"] - r["off_s"]
    print(f"task {args.task}, 2 processes, ddp; watchdog publishes every {r['poll_s']:g}s")
    print(f"step with watchdog {1000 * r['on_s']:.2f} ms, suspended {1000 * r['off_s']:.2f} ms: "
          f"difference {1000 * delta:+.3f} ms ({100 * delta / r['off_s']:+.2f} % of a step; noise included)")
    print(f"progress marks of one step: {1e6 * marks:.2f} µs ({100 * marks / r['off_s']:.4f} % of a step)")
    print(f"one publication (record + store round trip, in the watchdog's thread): {1000 * r['publication_s']:.2f} ms "
          f"every {r['poll_s']:g}s ({100 * r['publication_s'] / r['poll_s']:.3f} % of one core)")


if __name__ == "__main__":
    main()
