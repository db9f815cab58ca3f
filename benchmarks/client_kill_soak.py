"""Kill -9 at random moments of the loop shapes real trainers use, rerun, compare the final weights.

Each trial starts ``paratrain run --nproc-per-node 2 tests/clients/loops.py`` (a nanoGPT-style loop
by default: the next batch drawn between forward and backward, a checkpoint at the top of an
iteration), SIGKILLs one worker — or the whole job — once the run reached a random step plus a
random delay (anywhere: a forward, a draw, a save), then reruns the same command to its end and
compares the final weights with an uninterrupted run's, bit for bit. Before the saved data
position counted what the optimizer consumed, a kill after a save taken with a drawn batch
waiting lost that batch in silence.

    python benchmarks/client_kill_soak.py --trials 20 --seed 1 [--shape prefetch|top_save|iterations]

Prints one line per trial and the counts: trials, kills that ended their run, reruns that
resumed from a checkpoint, final weights bit-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "clients" / "loops.py"
WAIT_S = 300


def environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "TORCHELASTIC", "PARATRAIN_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"
    return env


class Trials:
    def __init__(self, workdir: Path, shape: str, steps: int, save_every: int, step_seconds: float):
        self.workdir, self.shape, self.steps = workdir, shape, steps
        self.save_every, self.step_seconds = save_every, step_seconds
        self.env = environment()

    def start(self, directory: Path, progress: Path) -> subprocess.Popen:
        command = [sys.executable, "-m", "paratrain", "run", "--nproc-per-node", "2", str(SCRIPT), str(directory),
                   "--shape", self.shape, "--steps", str(self.steps), "--save-every", str(self.save_every),
                   "--step-seconds", str(self.step_seconds), "--progress", str(progress)]
        log = open(directory.with_suffix(f".{int(time.time() * 1000)}.log"), "w")  # noqa: SIM115 (the child's)
        return subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def complete(self, directory: Path) -> dict:
        """Run the command to its end; the final weights and where it resumed from."""
        directory.mkdir(parents=True, exist_ok=True)
        process = self.start(directory, directory / "progress")
        code = process.wait(timeout=WAIT_S)
        if code != 0:
            raise RuntimeError(f"the run in {directory} ended with exit code {code}; see its .log next to it")
        return json.loads((directory / "final.json").read_text())

    def killed(self, directory: Path, rng: random.Random) -> tuple[int, str, int]:
        """Start, SIGKILL at a random moment; (step reached, what was killed, the launcher's exit code)."""
        directory.mkdir(parents=True, exist_ok=True)
        progress = directory / "progress"
        target = rng.randrange(1, self.steps - 1)
        whole_job = rng.random() < 0.25
        process = self.start(directory, progress)
        deadline = time.monotonic() + WAIT_S
        while _step(progress) < target and process.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no step {target} within {WAIT_S}s")
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 2 * self.step_seconds))
        reached = _step(progress)
        if whole_job:
            what = "job"
            os.killpg(process.pid, signal.SIGKILL)
        else:
            workers = [child for child in psutil.Process(process.pid).children()
                       if child.status() != psutil.STATUS_ZOMBIE]
            what = "worker" if workers else "nothing (the run had ended)"
            if workers:
                rng.choice(workers).send_signal(signal.SIGKILL)
        code = process.wait(timeout=WAIT_S)
        return reached, what, code


def _step(progress: Path) -> int:
    try:
        return int(progress.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shape", default="prefetch", choices=["prefetch", "top_save", "iterations"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--save-every", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="client-kill-soak-") as work:
        trials = Trials(Path(work), args.shape, args.steps, args.save_every, args.step_seconds)
        reference = trials.complete(Path(work) / "uninterrupted")["weights"]
        landed = resumed = identical = 0
        for trial in range(1, args.trials + 1):
            directory = Path(work) / f"trial-{trial}"
            reached, what, code = trials.killed(directory, rng)
            final = trials.complete(directory)
            landed += code != 0
            resumed += final["resumed_from"] > 0
            identical += final["weights"] == reference
            print(f"trial {trial}: SIGKILL of the {what} at step {reached} (exit {code}); rerun resumed from step "
                  f"{final['resumed_from']}; final weights {'identical' if final['weights'] == reference else 'DIFFER'}",
                  flush=True)
    print(f"{args.shape}: {args.trials} trials, {landed} kills ended their run, {resumed} reruns resumed from a "
          f"checkpoint, {identical} bit-identical to the uninterrupted run ({time.monotonic() - started:.0f} s)")
    sys.exit(0 if identical == args.trials else 1)


if __name__ == "__main__":
    main()
