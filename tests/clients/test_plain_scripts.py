"""Plain torch.distributed scripts (nothing of paratrain) under ``paratrain run``: a restart after a
killed worker meets on fresh keys and resumes, the restart is said in one line, every line has one
rank tag, each rank computes on the CPUs the launcher's binding line names, and two ranks that raise at
once are each named with their own error."""

import os
import re
import subprocess

import torch

from tests.support import ROOT, clean_env, paratrain_cmd

SCRIPTS = ROOT / "tests" / "clients" / "scripts"
HANG_GUARD_S = 240  # a guard against a hang, not a performance limit


def _run(*args, cwd):
    return subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", *args), cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_a_killed_worker_restarts_the_group_and_the_run_ends_where_an_uninterrupted_one_does(tmp_path):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    killed.mkdir(), whole.mkdir()
    done = _run("--max-restarts", "1", str(SCRIPTS / "plain_ddp.py"), str(killed), "--die-at", "9", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # Torch's agent restarts in silence; the launcher says who ended, how, and which attempt starts.
    assert re.search(r"paratrain run: rank 1 \(local rank 1, host \S+, pid \d+\) was killed by SIGKILL.*; "
                     r"restarting the group: attempt 2 of 2", done.stderr), done.stderr[-3000:]
    assert "[rank1]:attempt 1 starts at step 8" in done.stdout
    # The first attempt's traceback (rank 0 lost its peer) carries the launcher's tag once.
    assert not re.search(r"^\[rank\d\]:\s*\[rank\d\]", done.stdout + done.stderr, re.MULTILINE)
    plain = _run(str(SCRIPTS / "plain_ddp.py"), str(whole), cwd=tmp_path)
    assert plain.returncode == 0
    resumed, uninterrupted = torch.load(killed / "final.pt"), torch.load(whole / "final.pt")
    assert all(torch.equal(resumed[name], uninterrupted[name]) for name in uninterrupted)
    # The launcher's binding line is true of a script that only calls init_process_group: once it joined,
    # each rank's main thread computes on CPUs of its own (before, only pt.Runtime bound them).
    usable = os.sched_getaffinity(0)
    bound = [set(map(int, (whole / f"cpus.{rank}").read_text().split())) for rank in (0, 1)]
    if len(usable) >= 2:
        assert "each CPU worker computes on CPUs of its own" in plain.stderr, plain.stderr[-2000:]
        assert all(cpus and cpus < usable for cpus in bound) and not bound[0] & bound[1], bound
    else:
        assert bound == [usable, usable]


def test_two_ranks_that_raise_at_once_are_each_named_with_their_own_error(tmp_path):
    done = _run(str(SCRIPTS / "two_ranks_raise.py"), cwd=tmp_path)
    assert done.returncode == 1
    verdict = [line for line in done.stderr.splitlines() if line.startswith("paratrain run: error:")]
    assert len(verdict) == 1, done.stderr[-3000:]
    # Whichever the launcher saw first, the other rank's own error is there too, never "stopped by the launcher".
    assert "ValueError: bad input on rank 0" in verdict[0] and "ValueError: bad input on rank 1" in verdict[0]
    assert "stopped by the launcher" not in verdict[0].replace("the launcher stopped it as it exited", "")
