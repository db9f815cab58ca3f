"""The Runtime's own watchdog (no ``rt.watchdog``, on under pt.spawn) names the rank that stopped,
wherever it stopped, with its own frames: real processes, gloo, 2 and 3 ranks."""

from __future__ import annotations

import re

import pytest

import paratrain as pt
from paratrain.diagnostics.watchdog import group_timeout_with_watchdog, runtime_stall_timeout
from paratrain.errors import ConfigError
from tests.diagnostics.watchdog.stall_positions import train

STALL_TIMEOUT_S = 6.0  # small, yet above the lag between ranks' starts on a busy 2-core machine
# Where each position stops: the stalled rank's own innermost frame.
FRAMES = {
    "before-forward": "stuck_before_forward (stall_positions.py",
    "forward": "stuck_in_forward (stall_positions.py",
    "backward": "stuck_in_backward_hook (stall_positions.py",
    "between": "stuck_before_step (stall_positions.py",
    "evaluation": "stuck_evaluating (stall_positions.py",
    "checkpoint": "stuck_writing_checkpoint (stall_positions.py",
    "rank0-branch": "stuck_in_rank0_branch (stall_positions.py",
}
# At 3 ranks the stalled one is the middle or the last rank (rank 0 in a rank-0-only branch), and
# both of the others must be named as waiting: blame is not "the rank that is not rank 0", nor "the
# last rank", nor "the one rank that waits". Every position runs at 3 ranks; at 2 ranks (one waiting
# rank), the backward position, where the waiting rank is inside the same autograd pass (DDP's
# gradient all-reduce) as the stalled rank's hook. (Each case waits out the stall timeout: the
# 2-rank run of every position proved nothing the 3-rank runs do not.)
STALLED_OF_3 = {"before-forward": 1, "forward": 2, "backward": 1, "between": 2, "evaluation": 1, "checkpoint": 2,
                "rank0-branch": 0}
CASES = [(position, 3, STALLED_OF_3[position]) for position in FRAMES] + [("backward", 2, 1)]


def stall_report(tmp_path, *args, nprocs: int) -> str:
    with pytest.raises(pt.WorkerError) as failure:
        pt.spawn(train, nprocs=nprocs, args=(*args[:2], STALL_TIMEOUT_S, str(tmp_path), *args[2:]))
    assert failure.value.exc_type == "CollectiveTimeoutError", failure.value
    return failure.value.remote_message


@pytest.mark.parametrize(("position", "nprocs", "stalled"), CASES, ids=[f"{p}-{n}ranks" for p, n, _ in CASES])
def test_the_rank_that_stopped_is_named_with_its_own_frames(tmp_path, position, nprocs, stalled):
    report = stall_report(tmp_path, position, stalled, nprocs=nprocs)
    # Steps completed: the stops after the optimizer step (evaluation, checkpoint, branch) come after 3.
    completed = 3 if position in ("evaluation", "checkpoint", "rank0-branch") else 2
    named = re.match(rf"stall: no progress for 6s: rank (\d+) \(host [^,]+, pid \d+\) at step {completed}, phase [\w-]+, in (.*?) "
                     r"\(not in a collective: the others wait for it\); ", report)
    assert named and int(named.group(1)) == stalled, report
    assert named.group(2).startswith(FRAMES[position]), report
    waiting = sorted(int(r) for r in re.findall(r"rank (\d+) waits at step \d+, phase \w+ \(inside a collective\)", report))
    assert waiting == [r for r in range(nprocs) if r != stalled], report
    # Only the stalled rank's frames: a waiting rank's would show torch's autograd or c10d files.
    assert "distributed_c10d.py" not in report and (position == "backward" or "(graph.py" not in report), report


def test_a_declared_busy_phase_is_waited_for_within_its_limit_and_named_past_it(tmp_path):
    # rank 0 evaluates alone for longer than the stall timeout; the others wait in the barrier: no stall.
    steps = pt.spawn(train, nprocs=2, args=("busy", 0, STALL_TIMEOUT_S, str(tmp_path), STALL_TIMEOUT_S + 3, 30.0))
    assert steps == 64 // 4 // 2  # every step ran (rank 0's count)
    report = stall_report(tmp_path, "busy", 0, 3600.0, 8.0, nprocs=2)
    assert re.match(r"stall: no progress for 6s: rank 0 \(host [^,]+, pid \d+\) at step 3, phase [\w-]+, busy with "
                    r"'evaluation' for \d+s, past its limit of 8s \(rt.busy\(\.\.\., limit=\) if it may take longer\), "
                    r"in evaluate_on_one_rank \(stall_positions.py", report), report


def test_the_default_stall_timeout_and_its_bad_values():
    launched = {"PARATRAIN_LAUNCHER_PID": "1"}
    assert runtime_stall_timeout(None, 600.0, launched) == 600.0  # the process group's timeout
    assert runtime_stall_timeout(None, 600.0, {"PARATRAIN_SPAWNED": "1"}) == 600.0
    assert runtime_stall_timeout(None, 600.0, {**launched, "PARATRAIN_STALL_TIMEOUT": "45"}) == 45.0
    assert runtime_stall_timeout(None, 600.0, {**launched, "PARATRAIN_STALL_TIMEOUT": "0"}) == 0.0  # off
    assert runtime_stall_timeout(None, 600.0, {}) == 0.0  # plain torchrun: only when asked for
    assert runtime_stall_timeout(30, 600.0, {}) == 30.0 and runtime_stall_timeout(0, 600.0, launched) == 0.0
    for bad in (-1, float("nan"), float("inf"), "10", True):
        with pytest.raises(ConfigError, match=r"stall_timeout=\.\.\.\) must be 0 \(no watchdog\) or a positive number"):
            runtime_stall_timeout(bad, 600.0, launched)
    with pytest.raises(ConfigError, match=r"PARATRAIN_STALL_TIMEOUT='ten' is not a number of seconds"):
        runtime_stall_timeout(None, 600.0, {**launched, "PARATRAIN_STALL_TIMEOUT": "ten"})
    with pytest.raises(ConfigError, match=r"PARATRAIN_STALL_TIMEOUT must be 0 \(no watchdog\) or a positive number"):
        runtime_stall_timeout(None, 600.0, {**launched, "PARATRAIN_STALL_TIMEOUT": "-5"})
    # gloo's own timeout gets a margin, so the watchdog names the rank before gloo blames a waiting one.
    assert group_timeout_with_watchdog(600.0, 600.0) > 600.0 and group_timeout_with_watchdog(600.0, 0.0) == 600.0
    assert group_timeout_with_watchdog(600.0, 60.0) == 600.0


def test_busy_refuses_a_bad_phase_or_limit():
    rt = pt.Runtime(strategy="single", timeout=100)
    for phase, limit, message in (("", None, "needs the phase's name"), ("eval", 0, "positive number of seconds"),
                                  ("eval", 200, "longer than the process group's timeout")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            rt.busy(phase, limit=limit)
    with rt.busy("evaluation"):  # no watchdog in one process: nothing to do
        pass
    rt.close()
