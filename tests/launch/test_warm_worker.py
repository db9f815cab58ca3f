"""``paratrain run --warm-workers`` through the real CLI, 2 processes: a plain DDP script whose rank 1 is SIGKILLed
restarts in warm workers (forked by the pool: torch imported before the script's first line, in both attempts)
and ends with the same weights, bit for bit, as a cold run's; each warm worker starts as the cold one does (the
script's folder first on sys.path, ``__main__`` with an absolute ``__file__``, ``-u``'s unbuffered streams on the
agent's log files); ``paratrain train`` runs in warm workers, which write into the run directory their launcher
locked for them."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import psutil
import torch

from tests.support import ROOT, clean_env, paratrain_cmd

SCRIPT = ROOT / "tests" / "launch" / "warm_script.py"
HANG_GUARD_S = 240  # a guard against a hang, not a performance limit
SAME_AS_COLD = ("path0", "file", "name", "argv0", "cwd", "stdout", "stderr", "stdout_is_file")


def _run(out: Path, flags: tuple[str, ...] = (), script_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    out.mkdir()
    return subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", *flags, str(SCRIPT), str(out), "train",
                                        *script_args),
                          cwd=out.parent, env=clean_env(), capture_output=True, text=True, timeout=HANG_GUARD_S)


def _started(out: Path, attempt: int, rank: int) -> dict:
    return json.loads((out / f"started.{attempt}.{rank}.json").read_text())


def test_a_killed_warm_worker_restarts_warm_and_the_run_ends_with_the_cold_runs_weights(tmp_path):
    warm, cold = tmp_path / "warm", tmp_path / "cold"
    done = _run(warm, ("--warm-workers", "--max-restarts", "1"), ("--die-at", "9"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"paratrain run: rank 1 \(local rank 1, host \S+, pid \d+\) was killed by SIGKILL.*; "
                     r"restarting the group: attempt 2 of 2", done.stderr), done.stderr[-3000:]
    assert "starts cold" not in done.stderr
    assert "[rank1]:attempt 1 starts at step 8" in done.stdout
    pool = _started(warm, 1, 0)["ppid"]
    assert not psutil.pid_exists(pool), "the warm pool outlived its launcher's normal end"
    plain = _run(cold)
    assert plain.returncode == 0, plain.stderr[-3000:]
    for attempt in (0, 1):
        for rank in (0, 1):
            started = _started(warm, attempt, rank)
            assert started["torch_before"] and started["ppid"] != started["launcher"], started  # the pool's child
            reference = _started(cold, 0, rank)
            assert not reference["torch_before"] and reference["ppid"] == reference["launcher"], reference
            assert {k: started[k] for k in SAME_AS_COLD} == {k: reference[k] for k in SAME_AS_COLD}
    resumed, uninterrupted = torch.load(warm / "final.pt"), torch.load(cold / "final.pt")
    assert all(torch.equal(resumed[name], uninterrupted[name]) for name in uninterrupted)


def test_paratrain_train_in_warm_workers_writes_into_the_run_directory_its_launcher_locked(tmp_path):
    """The launcher holds ``--out``'s lock for its workers; a warm worker's parent is the pool, whose parent is that
    launcher."""
    out = tmp_path / "run"
    done = subprocess.run(paratrain_cmd("train", "digits", "--nproc-per-node", "2", "--warm-workers", "--max-steps", "3",
                                        "--limit-train", "32", "--limit-eval", "16", "--batch-size", "4",
                                        "--no-tensorboard", "--no-progress", "--out", str(out)),
                          cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "starts cold" not in done.stderr and (out / "summary.json").is_file()
