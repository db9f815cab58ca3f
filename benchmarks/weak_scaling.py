"""CPU weak scaling: 2 processes × 1 thread against 1 process × 1 thread, same batch per process.

Ideal weak scaling doubles the samples per second: every process trains its own batch
and only the gradient all-reduce is added. The ratio printed is

    efficiency = samples/s(2 processes) / (2 × samples/s(1 process))

(the target is ≥ 0.95). Both sides run through the real CLI —
``paratrain train TASK --max-steps S`` — and their samples/s is the fit loop's own
training figure from ``summary.json`` (evaluation and start-up are not in it). The
1- and 2-process runs alternate ``--rounds`` times, so machine noise hits both; the
table shows every round and the median of the per-round efficiencies.

    python benchmarks/weak_scaling.py [--task text-cls] [--steps 150] [--rounds 3] [-- extra train flags]

Every process gets one thread (OMP_NUM_THREADS=1); on a 2-core machine the 2-process
run then uses both cores, the 1-process run one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from cli_runs import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="text-cls")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="more `paratrain train` flags, after --")
    args = parser.parse_args()
    print(f"{args.task}, {args.steps} steps per run, OMP_NUM_THREADS=1, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}, extra flags: {' '.join(args.extra) or 'none'}")
    print(f"{'round':>5} {'1 proc s/s':>11} {'2 procs s/s':>12} {'efficiency':>11}")
    efficiencies = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = (1, 2) if round_ % 2 == 0 else (2, 1)
            rates = {n: train(args.task, n, args.steps, args.extra, Path(tmp) / f"p{n}")["samples_per_s"] for n in order}
            efficiencies.append(rates[2] / (2 * rates[1]))
            print(f"{round_ + 1:>5} {rates[1]:>11.1f} {rates[2]:>12.1f} {efficiencies[-1]:>11.3f}", flush=True)
    print(f"median efficiency {statistics.median(efficiencies):.3f} (target >= 0.95); "
          f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
