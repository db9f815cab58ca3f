"""Repeated runs: the rotated order, the median and range, the verdict against a baseline, the steps that
make a --min-time window, and when other work on the machine is flagged."""

import pytest

from paratrain.bench.load import Load
from paratrain.bench.round_plan import round_order, steps_for_min_time
from paratrain.bench.spread import INDISTINGUISHABLE, Spread, per_round_ratio, pick_baseline, verdict


def test_each_round_starts_one_method_later():
    methods = ["single", "ddp", "accelerate"]
    assert [round_order(methods, r) for r in range(4)] == [
        ["single", "ddp", "accelerate"], ["ddp", "accelerate", "single"], ["accelerate", "single", "ddp"],
        ["single", "ddp", "accelerate"]]
    assert round_order([], 3) == []


def test_a_spread_is_the_median_and_the_extremes():
    assert Spread.of([337.0, 365.0, 327.0, 379.0, 340.0]) == Spread(median=340.0, low=327.0, high=379.0, n=5)
    assert Spread.of([2.0, 1.0]).median == 1.5
    assert Spread.of([]) is None


# Medians 5 % apart, ranges overlapping: the median alone would call one faster.
DDP = Spread.of([345, 350, 318, 310, 346, 317, 312, 352, 342])
ACCELERATE = Spread.of([361, 363, 362, 366, 359, 365, 363, 365, 340])


@pytest.mark.parametrize("speed, baseline, expected", [
    (Spread.of([400, 420, 410]), Spread.of([300, 320, 310]), "faster"),
    (Spread.of([300, 320, 310]), Spread.of([400, 420, 410]), "slower"),
    (Spread.of([300, 401, 310]), Spread.of([400, 420, 410]), INDISTINGUISHABLE),  # ranges touch
    (ACCELERATE, DDP, INDISTINGUISHABLE),  # medians differ, ranges overlap: no claim
    (Spread.of([500]), Spread.of([300, 310]), "one run"),  # one draw has no range
])
def test_a_verdict_only_when_the_ranges_separate(speed, baseline, expected):
    assert verdict(speed, baseline) == expected


def test_the_baseline_is_the_fastest_median_unless_named():
    speeds = {"single": Spread.of([10, 30]), "ddp": Spread.of([18, 19]), "fsdp": Spread.of([5, 6])}
    assert pick_baseline(speeds) == "single"
    assert pick_baseline(speeds, "ddp") == "ddp"
    assert pick_baseline(speeds, "accelerate") is None  # named but not measured: no verdicts
    assert pick_baseline({}) is None


def test_a_method_that_trained_something_else_is_no_yardstick():
    speeds = {"single": Spread.of([10, 11]), "ddp": Spread.of([18, 19]), "lr-double": Spread.of([30, 31])}
    assert pick_baseline(speeds, yardsticks={"single", "ddp"}) == "ddp"  # lr-double is faster, and ✗
    assert pick_baseline(speeds, "lr-double", yardsticks={"single", "ddp"}) == "lr-double"  # asked for by name
    assert pick_baseline(speeds, yardsticks=set()) == "lr-double"  # nothing passed: the fastest, as before


def test_short_windows_get_more_steps_for_every_method():
    # 50 measured steps in 0.5 s, --min-time 3: 0.01 s a step, 1.5 × 3 s → 450 measured steps.
    assert steps_for_min_time(60, 10, 0.5, 3.0) == 460
    assert steps_for_min_time(60, 10, 4.0, 3.0) == 60  # long enough already
    assert steps_for_min_time(60, 10, 0.5, 0.0) == 60  # --min-time 0: exactly --steps


def test_other_work_is_flagged_when_it_came_went_or_ran_beside():
    assert not Load(before=0.1, during=0.2, after=0.3).changed
    assert Load(before=0.1, during=0.2, after=1.1).changed
    assert Load(before=0.1, during=0.9, after=0.1).changed


def test_the_per_round_ratio_takes_the_machines_drift_between_rounds_out():
    # The machine slows down from round to round; a method 5 % behind in every round has ranges that
    # overlap the baseline's (no verdict), while its per-round ratio says 0.95 every time.
    baseline = {1: 600.0, 2: 550.0, 3: 500.0, 4: 450.0}
    method = {r: 0.95 * v for r, v in baseline.items()}
    assert verdict(Spread.of(method.values()), Spread.of(baseline.values())) == INDISTINGUISHABLE
    ratio = per_round_ratio(method, baseline)
    assert (ratio.median, ratio.low, ratio.high, ratio.n) == pytest.approx((0.95, 0.95, 0.95, 4))


def test_the_per_round_ratio_uses_only_rounds_both_methods_measured():
    ratio = per_round_ratio({1: 100.0, 2: 200.0, 3: 90.0}, {1: 100.0, 3: 100.0, 4: 50.0})
    assert (ratio.low, ratio.high, ratio.n) == pytest.approx((0.9, 1.0, 2))
    assert per_round_ratio({1: 100.0}, {2: 100.0}) is None
