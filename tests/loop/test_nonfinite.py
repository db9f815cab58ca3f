"""Non-finite training on two real processes: stopped together, nothing bad saved; or skipped, bounded.

Before the guard, a loss that turned NaN trained on to exit 0 and saved NaN weights as the best checkpoint.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import paratrain as pt
from paratrain.checkpoint import catalog
from paratrain.errors import ConfigError, WorkerError
from paratrain.loop.nonfinite import NonFiniteGuard, Verdict, local_weights_finite, stop_message
from tests.loop.workers import fit_nan_after, fit_nan_skips


def _weights_finite(checkpoint: Path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(checkpoint / "model.safetensors").values())


def test_a_loss_that_turns_nan_on_one_rank_stops_every_rank_and_no_nan_checkpoint_is_saved(tmp_path):
    out = tmp_path / "run"
    # Rank 1's 5th forward (step 5) is NaN; rank 0's loss stays finite. The save due at step 6 must not happen.
    with pytest.raises(WorkerError) as caught:
        pt.spawn(fit_nan_after, 2, args=(str(out), 5, None, 1, "stop"), timeout=180)
    message = str(caught.value)
    assert "NonFiniteError" in message and "training loss was not finite (NaN or inf) at step 5" in message
    assert "the last good checkpoint is" in message and "step-000004" in message
    saved = [path for path, _ in catalog.complete(out / "checkpoints")]
    assert [p.name for p in saved] == ["step-000002", "step-000004"]
    assert all(_weights_finite(p) for p in saved)
    assert not (out / "summary.json").exists()  # no result was reported
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(e["event"] == "nonfinite" and e["step"] == 5 for e in events)


@pytest.fixture(scope="module")
def skip_runs(tmp_path_factory):
    """The skip policy, in one 2-process job: a run with 2 bad steps, then one with more bad steps than its
    bound (which fails the job). Returns the first's folder and result, and the job's error."""
    root = tmp_path_factory.mktemp("skip")
    try:
        pt.spawn(fit_nan_skips, 2, args=(str(root / "finishing"), str(root / "past-bound")), timeout=180)
        error = None
    except WorkerError as exc:
        error = exc
    finishing = root / "finishing"
    result = json.loads((finishing / "result.json").read_text()) if (finishing / "result.json").exists() else None
    return finishing, result, error


def test_skip_policy_drops_the_bad_steps_and_finishes_with_finite_weights(skip_runs):
    out, result, error = skip_runs
    assert result is not None, f"the run with 2 bad steps did not finish: {error}"
    assert result["steps"] == 12  # skipped steps still count
    skips = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "nonfinite_skip"]
    assert [e["step"] for e in skips] == [5, 6]
    assert all(_weights_finite(p) for p, _ in catalog.complete(out / "checkpoints"))
    best = json.loads((out / "summary.json").read_text())["best_metrics"]
    assert best["loss"] == best["loss"]  # not NaN


def test_skip_policy_stops_after_its_bound(skip_runs):
    _, _, error = skip_runs
    assert error is not None, "the run past the bound of skips finished"
    assert re.search(r"more than 3 steps had non-finite losses or gradients \(the last at step 8\)", str(error)), error


@pytest.mark.parametrize("options, needle", [
    ({"lr": float("nan")}, "lr must be a positive number (finite), got nan"),
    ({"lr": float("inf")}, "lr must be a positive number (finite), got inf"),
    ({"weight_decay": float("nan")}, "weight_decay must be a number >= 0 (finite), got nan"),
    ({"on_nonfinite": "ignore"}, "on_nonfinite='ignore' is not one of stop, skip"),
])
def test_non_finite_hyperparameters_and_unknown_policies_are_refused_up_front(options, needle):
    with pytest.raises(ConfigError) as caught:
        pt.FitConfig(**options)
    assert needle in str(caught.value)


def test_fp16_skipped_steps_are_the_scalers_business_only_weights_are_checked():
    guard = NonFiniteGuard("stop", scaler_skips=True)
    guard.observe(3, [torch.tensor(float("inf"))], torch.tensor(float("nan")))
    assert not guard.agree(3, [torch.ones(2)]).bad  # no process group: the local verdict
    verdict = guard.agree(4, [torch.tensor([1.0, float("nan")])])
    assert verdict == Verdict(weights_step=4)
    assert "the weights were not finite (NaN or inf) at step 4" in stop_message(verdict, None)


def test_the_first_bad_step_is_kept_and_the_gradient_norm_counts_too():
    guard = NonFiniteGuard("stop")
    guard.observe(1, [torch.tensor(0.5)], torch.tensor(1.0))
    guard.observe(2, [torch.tensor(0.4)], torch.tensor(float("inf")))
    guard.observe(3, [torch.tensor(float("nan"))], None)
    verdict = guard.agree(3, [torch.ones(1)])
    assert (verdict.loss_step, verdict.norm_step, verdict.first_step) == (3, 2, 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_the_weights_check_finds_one_bad_element_in_any_tensor_of_any_floating_dtype(dtype, bad):
    weights = [torch.randn(3000, generator=torch.Generator().manual_seed(i)).to(dtype) for i in range(5)]
    weights.append(torch.arange(4))  # integers: always finite
    assert bool(local_weights_finite(weights))
    for tensor, index in ((0, 0), (2, 1234), (4, 2999)):  # the first, a middle and the last element
        poisoned = [w.clone() for w in weights]
        poisoned[tensor][index] = bad
        assert not bool(local_weights_finite(poisoned)), (tensor, index)


def test_the_weights_check_takes_large_finite_values_empty_and_zero_dim_tensors():
    large = [torch.tensor([1e300, -1e300], dtype=torch.float64), torch.tensor([65504.0]).half()]
    assert bool(local_weights_finite(large))
    assert bool(local_weights_finite([torch.empty(0), torch.tensor(2.0)])) and bool(local_weights_finite([]))
    assert not bool(local_weights_finite([torch.empty(0), torch.tensor(float("nan"))]))
