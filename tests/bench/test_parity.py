"""The parity figure and the step where a full-precision method leaves single's path."""

import pytest

from paratrain.bench.parity import TOLERANCE, departure, differs, drift_envelope, first_departure, loss_parity

SINGLE = [2.0, 1.5, 1.0, 0.5]


def test_parity_is_the_largest_relative_difference_over_the_first_steps():
    assert loss_parity([2.0, 1.5 * (1 + 3e-7), 1.0, 0.0], SINGLE, steps=3) == pytest.approx(3e-7)
    assert loss_parity([2.0, 1.5, 1.1, 0.5], SINGLE) == pytest.approx(0.1)


def test_only_full_precision_is_judged():
    assert differs(10 * TOLERANCE, "32-true") and not differs(10 * TOLERANCE, "bf16-mixed")
    assert not differs(TOLERANCE / 10, "32-true")
    assert differs(float("nan"), "32-true")


def test_the_first_step_beyond_the_tolerance():
    assert first_departure(SINGLE, SINGLE) is None
    assert first_departure([2.0, 1.5, 1.0 + 1e-3, 0.5], SINGLE) == 3


# A chaotic run: rounding differences grow ~30 % a step. The reference pair (single with its batches
# split as data parallelism splits them) shows how far correct runs drift apart by each step.
STEPS = 40
LOSS = [2.0 * 0.97**s for s in range(STEPS)]
PAIR = [loss * (1 + 1e-8 * 1.3**s) for s, loss in enumerate(LOSS)]


def with_gap(gap_at):
    return [loss * (1 + gap_at(s)) for s, loss in enumerate(LOSS)]


def test_a_correct_method_that_drifts_like_the_reference_pair_is_not_flagged():
    envelope = drift_envelope(PAIR, LOSS)
    ddp = with_gap(lambda s: -3e-8 * 1.3**s)  # another order of the same sums: the same growth, other sign and size
    assert first_departure(ddp, LOSS) is not None  # the uncalibrated rule called this a drift…
    assert departure(ddp, LOSS, envelope) is None  # …the calibrated one does not


def test_twice_the_learning_rate_departs_at_once():
    envelope = drift_envelope(PAIR, LOSS)
    lr_double = with_gap(lambda s: 0.0 if s == 0 else 0.02 * s)
    step, gap, allowed = departure(lr_double, LOSS, envelope)
    assert step == 2 and gap > allowed


def test_clipping_that_starts_late_is_caught_beyond_the_drift():
    envelope = drift_envelope(PAIR, LOSS)
    clipped = with_gap(lambda s: 1e-8 * 1.3**s if s < 25 else 1e-8 * 1.3**s + 2e-4)  # clipping bites from step 26
    step, gap, allowed = departure(clipped, LOSS, envelope)
    assert step == 26 and allowed < gap


def test_the_envelope_is_the_running_maximum_of_the_pairs_gaps():
    assert drift_envelope([1.0, 1.1, 1.0], [1.0, 1.0, 1.0]) == pytest.approx([0.0, 0.1, 0.1])
    assert departure([1.0 + 1e-7], [1.0], [0.0]) is None  # below the floor: a loss's own rounding
