"""The hang watchdog through the real CLI: a rank that sleeps for good is named, with its frame."""

from __future__ import annotations

import re
import subprocess
import time

from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, paratrain_cmd

FIT = str(ROOT / "tests" / "diagnostics" / "fit_script.py")
STALL_TIMEOUT_S = 8


def test_a_rank_sleeping_forever_is_named_with_its_frame_and_every_process_ends(tmp_path, cli_env):
    command = paratrain_cmd("run", "--nproc-per-node", "2", "--stall-timeout", str(STALL_TIMEOUT_S), FIT,
                            str(tmp_path / "run"), "--steps", "20", "--stall-rank", "1", "--stall-step", "3")
    run = subprocess.run(command, cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    ended = time.time()
    assert run.returncode == 124, run.stderr  # the watchdog's exit code, as GNU timeout's
    began = float(re.search(r"STALL BEGINS ([\d.]+)", run.stdout).group(1))
    assert ended - began <= STALL_TIMEOUT_S + 30  # the launcher (so every worker) ended within stall timeout + 30 s
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"paratrain run: error: the watchdog ended the job: stall: no progress for {STALL_TIMEOUT_S}s: "
                           "rank 1 (host "), last
    assert "at step 3, phase logging, in on_step_end (fit_script.py:" in last and "time.sleep(3600)" in last
    assert "rank 0 waits at step 3" in last and "every rank's Python stack is in its log" in last
    # The stalled rank wrote all its threads' stacks to its log (faulthandler); the others dump theirs too
    # unless the launcher stops them first (the first rank to exit ends the job).
    assert "[rank1]:paratrain watchdog: rank 1: a stall was detected; this rank's threads:" in run.stdout + run.stderr
    assert re.search(r"\[rank1\]:\s+File \".*fit_script.py\", line \d+ in on_step_end", run.stderr), run.stderr[-3000:]
