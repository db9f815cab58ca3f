"""grad_compression on 2 real processes: bf16/fp16 stay close to fp32, PowerSGD trains as well."""

from __future__ import annotations

import pytest

import paratrain as pt
from tests.strategy import workers

STEPS = 30
#: Largest per-step difference of the mean loss (losses start near 0.69) from fp32: bf16 keeps
#: 8 mantissa bits (relative rounding 2^-9 per gradient element), fp16 11.
TOLERANCE = {"bf16": 2e-2, "fp16": 3e-3}


#: Every multi-process run of this file: ``(worker, args)`` of tests/strategy/workers.py.
RUNS = {
    "losses fp32": ("losses_with_compression", ("none", STEPS)),
    "losses bf16": ("losses_with_compression", ("bf16", STEPS)),
    "losses fp16": ("losses_with_compression", ("fp16", STEPS)),
    "digits fp32": ("digits_accuracy_with_compression", ("none",)),
    "digits powersgd": ("digits_accuracy_with_compression", ("powersgd:4",)),
    "buckets powersgd": ("rebuilt_buckets_with_compression", ("powersgd:4",)),
    "buckets bf16": ("rebuilt_buckets_with_compression", ("bf16",)),
    "buckets powersgd 2 MB": ("rebuilt_buckets_with_compression", ("powersgd:4", 2)),
}


@pytest.fixture(scope="module")
def runs() -> dict:
    """Every run of :data:`RUNS`, one after the other in one 2-process job (each under its own Runtime)."""
    return dict(zip(RUNS, pt.spawn(workers.compression_runs, 2, args=(list(RUNS.values()),)), strict=True))


def test_bf16_and_fp16_hooks_keep_every_step_loss_within_tolerance_of_fp32(runs):
    fp32 = runs["losses fp32"]
    assert fp32[-1] < fp32[0]  # it learns
    for mode, tolerance in TOLERANCE.items():
        compressed = runs[f"losses {mode}"]
        worst = max(abs(a - b) for a, b in zip(fp32, compressed))
        assert worst <= tolerance, f"{mode}: a step's loss is {worst:.2e} from fp32's (tolerance {tolerance})"
        assert compressed != fp32  # the hook really rounded the gradients


def test_powersgd_trains_digits_into_the_same_accuracy_band_as_fp32(runs):
    fp32, powersgd = runs["digits fp32"], runs["digits powersgd"]
    assert fp32 >= 0.8 and powersgd >= 0.8
    assert abs(powersgd - fp32) <= 0.05, f"PowerSGD {powersgd:.3f} vs fp32 {fp32:.3f}"


def test_powersgd_on_gloo_reduces_all_gradients_in_one_bucket_unless_a_size_is_given(runs):
    # PowerSGD's hook waits for each bucket's all-reduces on gloo: one bucket waits once per step.
    # The 16-bit hooks keep DDP's buckets (a small first one overlaps with the backward).
    assert runs["buckets powersgd"] == [6303744]
    assert len(runs["buckets bf16"]) == 2
    assert len(runs["buckets powersgd 2 MB"]) == 3


def test_one_process_with_strategy_auto_ignores_the_compression_and_ddp_refuses_a_bad_one():
    with pt.Runtime(strategy="auto", grad_compression="auto") as rt:
        assert rt.strategy.name == "single"
    with pytest.raises(pt.ConfigError, match="grad_compression 'int8' is not one of"):
        pt.Runtime(strategy="ddp", grad_compression="int8")
    with pytest.raises(pt.ConfigError, match="strategy 'fsdp' does not take grad_compression"):
        pt.Runtime(strategy="fsdp", grad_compression="bf16")
