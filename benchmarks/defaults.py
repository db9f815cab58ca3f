"""Each fast default's effect in isolation: the default run against the same run with one switch flipped.

Runs ``paratrain train TASK --max-steps S`` through the real CLI on ``--nproc`` processes
(one thread each) — first with paratrain's defaults, then with exactly one of them
turned off (or, for ``--compile``, on) — alternating the two ``--rounds`` times, and
prints the samples/s of both and their ratio (> 1: the default is faster). Samples/s
is the fit loop's training figure (``summary.json``), without evaluation or start-up;
a compiled run's first steps include compilation, so its row also gives the wall time
of the whole run.

    python benchmarks/defaults.py [--task text-cls] [--nproc 2] [--steps 150] [--rounds 3] [--only NAME ...]

The switches (``paratrain train --help``):

* ``group-by-length`` — batches of similar lengths (text tasks): ``--no-group-by-length``;
* ``fused-optimizer`` — fused AdamW/Adam/SGD kernels: ``--no-fused-optimizer``;
* ``compile`` — ``torch.compile`` of the model, off by default on CPU: ``--compile``.

TF32 matmuls (``--no-tf32``) act only on CUDA GPUs; on this CPU the flag changes nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from cli_runs import train

SWITCHES = {
    "group-by-length": ["--no-group-by-length"],
    "fused-optimizer": ["--no-fused-optimizer"],
    "compile": ["--compile"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="text-cls")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="+", choices=sorted(SWITCHES), default=sorted(SWITCHES))
    args = parser.parse_args()
    print(f"{args.task}, {args.nproc} process(es) x 1 thread, {args.steps} steps per run, {args.rounds} alternating "
          f"rounds, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"{'switch':<16} {'flag':<22} {'default s/s':>12} {'flipped s/s':>12} {'default/flipped':>16} "
          f"{'wall s (default / flipped)':>27}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            rates: dict[str, list[float]] = {"default": [], "flipped": []}
            walls: dict[str, list[float]] = {"default": [], "flipped": []}
            for round_ in range(args.rounds):
                cases = ("default", "flipped") if round_ % 2 == 0 else ("flipped", "default")
                for case in cases:
                    extra = SWITCHES[name] if case == "flipped" else []
                    start = time.perf_counter()
                    summary = train(args.task, args.nproc, args.steps, extra, Path(tmp) / case)
                    walls[case].append(time.perf_counter() - start)
                    rates[case].append(summary["samples_per_s"])
            ratio = statistics.median(d / f for d, f in zip(rates["default"], rates["flipped"]))
            print(f"{name:<16} {' '.join(SWITCHES[name]):<22} {statistics.median(rates['default']):>12.1f} "
                  f"{statistics.median(rates['flipped']):>12.1f} {ratio:>16.3f} "
                  f"{statistics.median(walls['default']):>13.1f} / {statistics.median(walls['flipped']):<11.1f}",
                  flush=True)
    print(f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
