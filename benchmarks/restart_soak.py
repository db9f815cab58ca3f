"""Restarts of a plain script, soaked: ``paratrain run --max-restarts 1`` on a plain DDP script
(``tests/clients/scripts/plain_ddp.py``: init_process_group, DistributedSampler, rank 0's own
torch.save checkpoints, nothing of paratrain), one worker SIGKILLed at a random moment, and the
final weights compared bit for bit with an uninterrupted run's.

Each trial ends as one of: ``identical`` (restarted, same final weights), ``different`` (restarted,
other weights), ``failed`` (the launcher exited non-zero), ``hung`` (still running after
``--guard`` seconds: every wait of an attempt must end), or ``ended before the kill``.

    python benchmarks/restart_soak.py --trials 20 --seed 1
    python benchmarks/restart_soak.py --trials 10 --seed 1 --warm-workers   # the killed jobs in warm workers
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "clients" / "scripts" / "plain_ddp.py"


def launch(out: Path, restarts: int, warm: bool = False) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "paratrain", "run", "--nproc-per-node", "2", "--max-restarts", str(restarts),
           *(["--warm-workers"] if warm else []), str(SCRIPT), str(out), "--steps", "48"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def workers(launcher: subprocess.Popen) -> list[psutil.Process]:
    try:
        found = psutil.Process(launcher.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [p for p in found if any(SCRIPT.name in part for part in _cmdline(p))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def trial(rng: random.Random, reference: dict[str, torch.Tensor], wall_s: float, guard_s: float,
          warm: bool = False) -> str:
    with tempfile.TemporaryDirectory(prefix="restart-soak-") as folder:
        out = Path(folder)
        launcher = launch(out, restarts=1, warm=warm)
        kill_at = time.monotonic() + rng.uniform(0.3, 0.95) * wall_s
        killed, victim = False, None
        while launcher.poll() is None and not killed:
            time.sleep(0.02)
            if time.monotonic() >= kill_at:
                found = workers(launcher)
                if found:
                    victim = rng.choice(found).pid
                    os.kill(victim, signal.SIGKILL)
                    killed = True
        try:
            _, stderr = launcher.communicate(timeout=guard_s)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.communicate()
            return "hung"
        if not killed:
            return "ended before the kill"
        if launcher.returncode != 0:
            print(f"  failed (killed pid {victim}):\n" + "\n".join("  " + line for line in stderr.strip().splitlines()[-12:]))
            return "failed"
        restarted = "restarting the group: attempt 2 of 2" in stderr
        final = weights(out / "final.pt")
        same = all(torch.equal(final[name], reference[name]) for name in reference)
        return ("identical" if same else "different") + ("" if restarted else " (no restart line)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--guard", type=float, default=300.0, help="seconds after which a trial counts as hung")
    parser.add_argument("--warm-workers", action="store_true",
                        help="the killed jobs run with paratrain run --warm-workers (the reference runs cold)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="restart-soak-ref-") as folder:
        started = time.monotonic()
        reference_run = launch(Path(folder), restarts=0)
        if reference_run.wait(timeout=args.guard) != 0:
            sys.exit(f"the uninterrupted run failed: {reference_run.stderr.read()[-2000:]}")
        wall_s = time.monotonic() - started
        reference = weights(Path(folder) / "final.pt")
    print(f"uninterrupted run: {wall_s:.1f} s")
    rng = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    for number in range(1, args.trials + 1):
        outcome = trial(rng, reference, wall_s, args.guard, args.warm_workers)
        counts[outcome] += 1
        print(f"trial {number}: {outcome}", flush=True)
    print("; ".join(f"{name}: {count}" for name, count in sorted(counts.items())))


if __name__ == "__main__":
    main()
