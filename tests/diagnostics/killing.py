"""Kill a launcher's workers with SIGKILL at random moments of a run, as a crashing machine would."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from paratrain.checkpoint.catalog import complete


def newest_checkpoint_step(directory: Path) -> int:
    saved = complete(directory)
    return max((manifest.step or 0 for _, manifest in saved), default=0)


def kill_at_random_moments(
    launcher: subprocess.Popen, progress: Callable[[], int], last_step: int, moments: int, rng: random.Random
) -> list[tuple[int, int]]:
    """SIGKILL one random worker once the run passed each of ``moments`` random steps (plus a random delay).

    Returns ``(step reached, killed pid)`` for each kill. torch elastic's workers are the
    launcher's direct children.
    """
    targets = sorted(rng.sample(range(1, last_step - 1), moments))
    kills = []
    for target in targets:
        while progress() < target:
            assert launcher.poll() is None, f"the run ended before step {target}: {launcher.communicate()}"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.3))  # anywhere in the next step: forward, backward, a save
        workers = [p for p in psutil.Process(launcher.pid).children() if p.is_running()]
        assert workers, "no workers to kill"
        victim = rng.choice(workers)
        victim.send_signal(signal.SIGKILL)
        kills.append((target, victim.pid))
        print(f"[kill] step {target}: SIGKILL pid {victim.pid}", flush=True)
    return kills
