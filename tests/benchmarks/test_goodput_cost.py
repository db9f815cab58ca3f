"""The cost benchmark's figure measured inside one run: its steps against its own steps far from a save."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2] / "benchmarks"))  # goodput.py imports its neighbours as a script
from benchmarks.goodput import COST_EVERY, _cost_within_run  # noqa: E402


def _ends(seconds_of_step) -> list[float]:
    ends, now = [], 0.0
    for step in range(1, 101):
        now += seconds_of_step(step)
        ends.append(now)
    return ends


def test_steps_slowed_after_each_save_are_the_cost_and_even_steps_cost_nothing():
    even = _cost_within_run(_ends(lambda step: 0.1), [])
    assert even == {"within": pytest.approx(0.0), "late": 0}
    # 20 ms more in the step after each save (place 1 of a cycle) and 10 ms more in the next: 30 ms per 1 s cycle
    slowed = _ends(lambda step: 0.1 + {1: 0.02, 2: 0.01}.get(step % COST_EVERY, 0.0) * (step > 20))
    writes = [{"name": f"step-{saved:06d}", "start": slowed[saved - 1], "end": slowed[saved + 1]}
              for saved in range(20, 100, COST_EVERY)]
    measured = _cost_within_run(slowed, writes)
    assert measured["within"] == pytest.approx(0.03 * 8 / 89 / 0.1)  # 8 slowed cycles over 89 steps of 100 ms
    assert measured["late"] == 0


def test_a_write_still_running_when_the_far_steps_begin_is_counted_late():
    ends = _ends(lambda step: 0.1)
    writes = [{"name": "step-000020", "start": ends[19], "end": ends[24]},  # past step 25's start (the end of 24)
              {"name": "step-000030", "start": ends[29], "end": ends[31]}]
    assert _cost_within_run(ends, writes)["late"] == 1


def test_far_steps_that_began_before_their_cycles_write_ended_leave_the_pace():
    # each write (saves at 20, 30, ..., 90) runs to the end of step save+6 and slows the 6 steps it overlaps by 5 ms:
    # steps save+5 and save+6 began before it ended, so the pace is that of steps save+7 .. save+10 (100 ms)
    slowed = _ends(lambda step: 0.1 + (0.005 if step > 20 and 1 <= step % COST_EVERY <= 6 else 0.0))
    writes = [{"name": f"step-{saved:06d}", "start": slowed[saved - 1], "end": slowed[saved + 5]}
              for saved in range(20, 100, COST_EVERY)]
    measured = _cost_within_run(slowed, writes)
    assert measured["late"] == 8
    assert measured["within"] == pytest.approx(0.030 * 8 / 89 / 0.1)  # 30 ms per cycle, 8 cycles, 89 steps
