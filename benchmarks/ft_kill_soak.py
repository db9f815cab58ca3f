"""ft-ddp's kill test, ten times over: 3 replica groups of one process (``paratrain run --fault-tolerance
replicas``), group 2 killed with SIGKILL inside a gradient all-reduce and then at 9 more random moments,
each once it is back and healed. Prints the survivors' pids (one each: they never restarted), the steps
each life of group 2 started at (healed, not afresh), whether every epoch trained each sample exactly
once, and the largest difference of every group's final weights to one uninterrupted process.

    python benchmarks/ft_kill_soak.py [--kills 10] [--epochs 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.strategy import ft_workers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10, help="kills of group 2 in all, the first inside the all-reduce")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--step-sleep", type=float, default=0.5, help="seconds per step until the last kill landed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp(prefix="ft-kill-soak-"))
    steps = args.epochs * ft_workers.SAMPLES // ft_workers.GLOBAL
    began = time.monotonic()
    job = ft_workers.start_job(out, 3, FT_KILL_IN_ALLREDUCE="2:4", FT_STEP_SLEEP=str(args.step_sleep),
                               FT_EPOCHS=str(args.epochs))
    kills = ft_workers.kill_at_random(job, out, victim=2, kills=args.kills - 1, rng=random.Random(args.seed),
                                      last_step=steps - 10, wait_for_marker=True, guard_s=3600)
    code = job.wait(timeout=3600)
    result = ft_workers.verify(out, 3, args.epochs)
    print(f"exit {code} in {time.monotonic() - began:.0f} s; kills of group 2: 1 inside the all-reduce + {len(kills)} "
          f"at random moments")
    print(f"pids: {result['pids']}")
    print(f"first committed step of each life: {result['first_steps']}")
    print(f"every epoch each sample exactly once: {result['exactly_once']}; slice disagreements: "
          f"{result['disagreements']}; committed steps: {len(result['steps'])} of {steps}")
    print(f"max |final - uninterrupted| per group: {result['max_abs_diff']}")
    print(json.dumps({"kills": kills, **result, "out": str(out)}, default=str)[:2000])


if __name__ == "__main__":
    main()
