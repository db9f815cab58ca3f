"""The goodput ledger's sums, the Young/Daly interval and the timeline, on records made by hand."""

from __future__ import annotations

import math

import pytest

from paratrain.goodput import accounting, interval, timeline


def _records() -> list[dict]:
    """Two attempts: the first trains to step 30 and is killed; the second starts 5 s later, redoes
    steps 21-30 and ends; its launcher notes the end 0.5 s after its last record."""
    return [
        {"event": "attempt", "attempt": 1, "time": 102.0, "origin": 100.0},
        {"event": "save", "attempt": 1, "time": 110.2, "start": 110.0, "end": 110.2, "step": 20},
        {"event": "ledger", "attempt": 1, "time": 115.0, "step": 30,
         "seconds": {"startup": 4.0, "train": 10.8, "save": 0.2}},
        {"event": "attempt", "attempt": 2, "time": 121.0, "origin": 120.0, "prev_max_step": 30},
        {"event": "redone", "attempt": 2, "time": 127.0, "start": 124.0, "end": 127.0, "to_step": 30},
        {"event": "eval", "attempt": 2, "time": 131.0, "start": 130.0, "end": 131.0, "step": 50},
        {"event": "ledger", "attempt": 2, "time": 135.0, "step": 60, "ended": True,
         "seconds": {"startup": 4.0, "redone": 3.0, "train": 7.0, "eval": 1.0}},
        {"event": "end", "time": 135.5},
    ]


def test_every_second_from_the_first_launch_to_the_last_record_is_in_one_category():
    run = accounting.account(_records())
    assert run.wall == pytest.approx(35.5)
    assert run.seconds["recovery"] == pytest.approx(5.0)  # 115 → 120: the kill, the restart
    assert run.seconds["rest"] == pytest.approx(0.5)  # the launcher's end after a finished attempt
    assert run.seconds["train"] == pytest.approx(17.8) and run.seconds["redone"] == pytest.approx(3.0)
    assert run.accounted == pytest.approx(1.0)
    assert run.goodput == pytest.approx(17.8 / 35.5)
    summary = run.to_dict()
    assert summary["attempts"] == 2 and summary["failed_attempts"] == 1 and summary["saves"] == 1
    assert "restart/recovery wait" in "\n".join(run.table())


def test_an_attempt_killed_before_its_first_ledger_record_counts_as_start_up_then_recovery():
    records = _records()[:3] + [{"event": "attempt", "attempt": 2, "time": 123.0, "origin": 120.0},
                                {"event": "attempt", "attempt": 3, "time": 131.0, "origin": 130.0}]
    run = accounting.account(records)
    assert run.seconds["startup"] == pytest.approx(4.0 + 3.0 + 1.0)
    assert run.seconds["recovery"] == pytest.approx(5.0 + 7.0)
    assert run.accounted == pytest.approx(1.0)


def test_young_daly_interval_and_its_floor_at_the_write_time():
    assert interval.young_daly_seconds(0.5, 3600) == pytest.approx(math.sqrt(3600))
    assert interval.young_daly_seconds(0.01, 60, write_s=2.0) == 2.0  # a save cannot start before the last is written
    assert interval.interval_steps(60.0, 0.25) == 240
    assert interval.interval_steps(0.01, 0.25) == 1
    with pytest.raises(ValueError):
        interval.young_daly_seconds(1.0, 0)


def test_mtbf_is_the_wall_time_over_the_failed_attempts():
    assert interval.mtbf_from_attempts(_records()[:3]) == (pytest.approx(15.0), 1)  # one attempt, not ended
    assert interval.mtbf_from_attempts(_records()) == (pytest.approx(35.5), 1)
    assert interval.mtbf_from_attempts(_records()[-5:-1]) is None  # a finished attempt alone: no failure yet


def test_the_timeline_is_drawn(tmp_path):
    png = timeline.draw(accounting.account(_records()), tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_a_launch_whose_workers_died_before_their_clock_started_is_recovery():
    run = accounting.account([{"event": "launch", "time": 90.0}] + _records())
    assert run.wall == pytest.approx(45.5) and run.seconds["recovery"] == pytest.approx(15.0)
    assert run.accounted == pytest.approx(1.0)


def test_the_steps_beside_a_write_cost_what_they_took_beyond_the_steps_after_it():
    # 4 steps beside the write took 0.6 s; the 8 after it 0.8 s (0.1 s each): the write cost them 0.2 s
    assert interval.write_slowdown_seconds((10.0, 100), (10.6, 104), (11.4, 112)) == pytest.approx(0.2)
    assert interval.write_slowdown_seconds((10.0, 100), (10.2, 104), (11.4, 112)) == 0.0  # not slower: nothing
    assert interval.write_slowdown_seconds((10.0, 100), (10.0, 100), (11.4, 112)) == 0.0  # no step beside it
    assert interval.write_slowdown_seconds((10.0, 100), (10.6, 104), (10.7, 105)) == 0.0  # one step after: no reference
    assert interval.write_slowdown_seconds(None, (10.6, 104), (11.4, 112)) == 0.0  # no ledger open
