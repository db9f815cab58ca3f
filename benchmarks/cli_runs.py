"""One ``paratrain train`` run through the real CLI, for the benchmarks that compare whole runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def train(task: str, nproc: int, steps: int, extra: list[str], out: Path, threads: int = 1) -> dict[str, Any]:
    """``paratrain train TASK --max-steps STEPS`` on ``nproc`` processes of ``threads`` threads each;
    returns its ``summary.json`` (``samples_per_s`` is the fit loop's training figure: evaluation
    and start-up are not in it). A failed run ends the benchmark with its error."""
    command = [sys.executable, "-m", "paratrain", "train", task, "--nproc-per-node", str(nproc),
               "--max-steps", str(steps), "--no-eval-per-epoch", "--limit-eval", "64", "--log-every", str(steps),
               "--no-progress", "--no-tensorboard", "--out", str(out), "--fresh", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return json.loads((Path(out) / "summary.json").read_text())
