"""Rank 1 sleeps at the top of step 3, under the real CLI: the last line names rank 1, not the rank
that waited for it — a Runtime without rt.watchdog (its own watchdog), and a plain torch script
(no paratrain in it: the launcher reads the stack rank 1 wrote when it was stopped)."""

from __future__ import annotations

import subprocess

from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, paratrain_cmd

SCRIPT = str(ROOT / "tests" / "diagnostics" / "watchdog" / "stall_scripts.py")


def last_line(*args: str, env) -> tuple[int, str]:
    run = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", SCRIPT, *args), cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=HANG_GUARD_S)
    return run.returncode, run.stderr.strip().splitlines()[-1]


def test_an_own_loop_without_a_watchdog_names_the_sleeping_rank(cli_env):
    code, last = last_line("paratrain", env=cli_env)
    assert code == 124, last
    assert last.startswith("paratrain run: error: the watchdog ended the job: stall: no progress for 6s: rank 1 (host "), last
    assert "in loop (stall_scripts.py:29: time.sleep(3600)  # a stuck data read) <- paratrain_loop (" in last, last
    assert "(not in a collective: the others wait for it); rank 0 waits at step 2, phase backward (inside a collective)" \
        in last


def test_a_plain_torch_script_names_the_rank_not_in_the_collective(cli_env):
    code, last = last_line("torch", env=cli_env)
    assert code != 0
    assert last.startswith("paratrain run: error: rank 0 (local rank 0, host "), last  # gloo's timeout fired there
    assert ") was not in the collective: when stopped it was in torch_loop (stall_scripts.py:49: time.sleep(3600)" \
        in last and last.endswith("— the collective timed out waiting for it"), last
    assert "; rank 1 (host " in last


def test_stall_timeout_spellings_are_refused_before_any_process_starts(cli_env):
    for spelling, message in (("10s", "--stall-timeout '10s' is not a number of seconds"),
                              ("ten", "--stall-timeout 'ten' is not a number of seconds"),
                              ("inf", "--stall-timeout inf must be a finite number of seconds, or 0 to turn the watchdog off"),
                              ("-5", "--stall-timeout -5 must be a finite number of seconds, or 0 to turn the watchdog off")):
        run = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", "--stall-timeout", spelling, SCRIPT, "torch"),
                             cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert (run.returncode, run.stderr) == (2, f"paratrain run: error: {message}\n"), run.stderr
