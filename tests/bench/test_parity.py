"""The parity figure and the step where a full-precision method leaves single's path."""

import pytest

from paratrain.bench.parity import TOLERANCE, differs, first_departure, loss_parity

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
