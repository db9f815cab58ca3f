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
    killed_attempt: set[int] = set()  # the worker pids of the attempt the last kill ended
    for target in targets:
        # Each kill ends its own attempt: wait until the agent restarted the workers (all pids new),
        # so a kill never lands on a sibling of the worker killed before, which is dying anyway.
        while progress() < target or not (workers := _workers(launcher)) or {p.pid for p in workers} & killed_attempt:
            assert launcher.poll() is None, f"the run ended before step {target}: {launcher.communicate()}"
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.3))  # anywhere in the next step: start-up, forward, backward, a save
        workers = _workers(launcher)
        assert workers, "no workers to kill"
        victim = rng.choice(workers)
        victim.send_signal(signal.SIGKILL)
        killed_attempt = {p.pid for p in workers}
        kills.append((target, victim.pid))
        print(f"[kill] step {target}: SIGKILL pid {victim.pid}", flush=True)
    return kills


def _workers(launcher: subprocess.Popen) -> list[psutil.Process]:
    """The launcher's live worker processes (torch elastic's workers are its direct children)."""
    alive = []
    for child in psutil.Process(launcher.pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            pass
    return alive
