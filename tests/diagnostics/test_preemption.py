"""SIGTERM (SLURM scancel, Kubernetes eviction) to the launcher mid-run: finish the step, save, exit 75, resume."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from paratrain.diagnostics.preemption import PREEMPTED_EXIT_CODE, PreemptionGuard, poll_interval
from tests.diagnostics.killing import newest_checkpoint_step
from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, paratrain_cmd

DIGITS = ["digits", "--nproc-per-node", "2", "--limit-train", "384", "--limit-eval", "64",
          "--save-every", "4", "--no-eval-per-epoch", "--no-tensorboard", "--log-every", "1"]
# Far more steps than the ~1 s until the ranks next agree on a signal can reach: the SIGTERM lands mid-run
# however fast the machine is (with 60, a quiet machine could finish first; tests/loop covers that case).
MANY_STEPS = 5000


def _steps_logged(out) -> int:
    path = out / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return max((json.loads(line)["step"] for line in lines if '"train"' in line), default=0)


def _sigterm_once(launcher: subprocess.Popen, reached) -> str:
    """SIGTERM to the launcher once ``reached()`` is true; its stderr after it ended."""
    try:
        while not reached():
            assert launcher.poll() is None, launcher.communicate()
            time.sleep(0.02)
        launcher.send_signal(signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=HANG_GUARD_S)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    return stderr


def test_sigterm_to_the_launcher_saves_the_current_step_exits_preempted_and_the_rerun_resumes(tmp_path, cli_env):
    out = tmp_path / "digits"
    command = paratrain_cmd("train", *DIGITS, "--out", str(out))
    launcher = subprocess.Popen([*command, "--max-steps", str(MANY_STEPS)], cwd=ROOT, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr = _sigterm_once(launcher, lambda: _steps_logged(out) >= 6)  # past the first timed checkpoints
    assert launcher.returncode == PREEMPTED_EXIT_CODE == 75, stderr
    saved = newest_checkpoint_step(out / "checkpoints")
    assert saved == _steps_logged(out) < MANY_STEPS  # the last finished step was saved; training stopped there
    assert f"preempted by SIGTERM after step {saved}: checkpoint at step {saved}" in stderr
    assert stderr.strip().splitlines()[-1].startswith("paratrain train: error: preempted by SIGTERM")
    assert f"the newest checkpoint is at step {saved}" in stderr.strip().splitlines()[-1]

    rerun = subprocess.run([*command, "--max-steps", str(saved + 4)], cwd=ROOT, env=cli_env, capture_output=True,
                           text=True, timeout=HANG_GUARD_S)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from_step"] == saved and summary["steps"] == saved + 4


def test_a_timed_save_is_due_after_the_minutes_and_sigterm_is_only_a_flag():
    with PreemptionGuard(save_every_minutes=0.001) as guard:  # 60 ms
        assert guard.agree() == (False, False)
        time.sleep(0.1)
        assert guard.agree() == (False, True)
        guard.saved()
        assert guard.agree() == (False, False)
        signal.raise_signal(signal.SIGTERM)  # the process goes on: the loop decides when to stop
        assert guard.agree() == (True, False) and guard.requested_by == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_poll_agrees_about_once_a_second_whatever_the_step_time():
    assert poll_interval(0.001) == 1000 and poll_interval(0.05) == 20 and poll_interval(3.0) == 1
    with PreemptionGuard() as guard:
        assert guard.poll() == (False, False)  # the first step agrees; then fast steps agree rarely
        assert guard._interval > 100
        signal.raise_signal(signal.SIGTERM)
        answers = [guard.poll() for _ in range(guard._interval)]
        assert answers[:-1] == [(False, False)] * (len(answers) - 1) and answers[-1] == (True, False)
OWN_LOOP = str(ROOT / "tests" / "diagnostics" / "preemption_script.py")


def test_an_own_loop_with_rt_preemption_saves_on_sigterm_exits_75_and_resumes(tmp_path, cli_env):
    out = tmp_path / "own"
    out.mkdir()
    command = paratrain_cmd("run", "--nproc-per-node", "2", OWN_LOOP, str(out))
    launcher = subprocess.Popen([*command, "1000000"], cwd=ROOT, env=cli_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    steps = out / "steps.txt"
    stderr = _sigterm_once(launcher, lambda: steps.exists() and int(steps.read_text()) >= 5)
    assert launcher.returncode == PREEMPTED_EXIT_CODE, stderr
    assert "[rank0]:paratrain: preempted by SIGTERM; the loop saved and stops" in stderr, stderr
    saved = newest_checkpoint_step(out / "checkpoints")
    assert saved is not None and saved >= 5  # saved only because of the SIGTERM: no other save in the loop

    rerun = subprocess.run([*command, str(saved + 3)], cwd=ROOT, env=cli_env, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
    assert rerun.returncode == 0, rerun.stderr
    assert int((out / "resumed.txt").read_text()) == saved
    assert newest_checkpoint_step(out / "checkpoints") == saved + 3
