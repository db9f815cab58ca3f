"""Loss parity: does a method train the same model as ``single``, step by step?

The figure is the largest relative difference of a method's per-step global-batch
loss from ``single``'s over the first steps. Methods in full precision compute the
same sums in another order, so they agree to rounding (~1e-6 over a few steps);
a different learning rate, data order, batch or initial weights shows at once.
Mixed precision rounds on purpose: its figure is shown, not judged.
"""

from __future__ import annotations

PARITY_STEPS = 10
TOLERANCE = 1e-4  # fp32: rounding differences stay well below it over PARITY_STEPS steps
# Over a whole run, rounding differences grow (training is chaotic): a full-precision method departs
# only when it leaves single by more than DRIFT_FACTOR × what the reference pair shows by that step
# (two correct reductions of the same sums), and by more than DRIFT_FLOOR (a loss's own rounding).
DRIFT_FACTOR = 10.0
DRIFT_FLOOR = 1e-6


def loss_parity(losses: list[float], reference: list[float], steps: int = PARITY_STEPS) -> float:
    """max over the first ``steps`` steps of |loss − reference| / |reference|."""
    pairs = list(zip(losses, reference))[:steps]
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in pairs) if pairs else float("nan")


def judged(precision: str) -> bool:
    """Only full-precision methods are held to :data:`TOLERANCE`."""
    return precision == "32-true"


def differs(parity: float, precision: str) -> bool:
    return judged(precision) and not parity <= TOLERANCE


def first_departure(losses: list[float], reference: list[float]) -> int | None:
    """The first step (1-based) whose loss differs from the reference by more than :data:`TOLERANCE`, or None."""
    for step, (a, b) in enumerate(zip(losses, reference), 1):
        if not abs(a - b) / max(abs(b), 1e-12) <= TOLERANCE:
            return step
    return None


def gaps(losses: list[float], reference: list[float]) -> list[float]:
    """|loss − reference| / |reference| at every step."""
    return [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference)]


def drift_envelope(pair: list[float], reference: list[float]) -> list[float]:
    """How far two correct runs have drifted apart by each step: the running maximum of their gaps."""
    envelope, widest = [], 0.0
    for gap in gaps(pair, reference):
        widest = max(widest, gap)
        envelope.append(widest)
    return envelope


def departure(losses: list[float], reference: list[float], envelope: list[float]) -> tuple[int, float, float] | None:
    """The first step (1-based) where ``losses`` leave ``reference`` by more than correct runs do there:
    ``(step, gap, allowed)``; None when the method stays within the envelope all the way."""
    for step, gap in enumerate(gaps(losses, reference), 1):
        bound = envelope[min(step, len(envelope)) - 1] if envelope else 0.0
        allowed = max(DRIFT_FACTOR * bound, DRIFT_FLOOR)
        if not gap <= allowed:
            return step, gap, allowed
    return None
