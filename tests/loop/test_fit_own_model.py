"""Your own model and data through pt.fit on two real processes: the best on a tie, errors at
start-up, and resumes that would count wrong are refused.

Each failed on the release before: a tie made the report name one step and the catalog keep
another (then prune the first); a dict batch without labels, a model returning a tuple and an
empty dev set failed after an epoch (or in a raw torch error); another batch size or dev set on
resume reported untrue step counts and mixed metrics; another model in the same out_dir failed to
load with advice to load it partly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import paratrain as pt
from tests.loop.workers import fit_own_runs

SHAPES = {
    "tuple": "the model returned a tuple, not a tensor of logits",
    "dict-positional": "the model does not take those names",
    "dict-no-labels": "a dict batch needs 'labels' for the default evaluator",
    "empty-dev": "the dev set is empty",
}


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    """Every pt.fit of this file, one after another in one job of two processes, as scripts run
    one after another would (each fit makes and closes its own group): one start of torch, not one
    per fit. Name -> rank 0's result (or its error's line), and the tie's run directory."""
    tie = tmp_path_factory.mktemp("tie") / "run"
    resumed = str(tmp_path_factory.mktemp("resume") / "run")
    options = {"epochs": 4, "batch_size": 8}
    plan = {
        # An LR so small the predictions never change: every evaluation ties on accuracy.
        "tie": (str(tie), "plain", {"epochs": 3, "batch_size": 8, "lr": 1e-12, "keep_last": 1}),
        **{f"shape {case}": (None, case, {"epochs": 1, "batch_size": 8}) for case in SHAPES},
        # The last of these five resumes from what the first saved, past the three refused.
        "first": (resumed, "plain", {"epochs": 2, "batch_size": 8}),
        "other batch size": (resumed, "plain", {"epochs": 4, "batch_size": 4}),
        "other dev set": (resumed, "plain", {**options, "dev": 12}),
        "other model": (resumed, "mlp", options),
        "same": (resumed, "plain", options),
        "unused, find_unused_parameters": (None, "unused", {"epochs": 2, "batch_size": 8,
                                                            "find_unused_parameters": True}),
        "unused": (None, "unused", {"epochs": 2, "batch_size": 8}),  # last: DDP's error ends it mid-run
    }
    results = pt.spawn(fit_own_runs, 2, args=(list(plan.values()),), timeout=600)
    return dict(zip(plan, results, strict=True)), tie


def test_a_tie_keeps_the_earliest_best_everywhere_it_is_reported(fits):
    results, out = fits
    result = results["tie"]
    evals = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["event"] == "eval"]
    assert len({r["accuracy"] for r in evals}) == 1 and len(evals) == 3  # three ties
    assert result["best_step"] == evals[0]["step"] == 4
    assert Path(result["best_checkpoint"]).name == "step-000004" and Path(result["best_checkpoint"]).is_dir()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_step"] == 4 and summary["best_checkpoint"] == result["best_checkpoint"]


def test_shapes_that_cannot_train_are_named_before_the_first_step(fits):
    results, _ = fits
    for case, needle in SHAPES.items():
        assert needle in results[f"shape {case}"]["error"], (case, results[f"shape {case}"])


def test_a_resume_with_another_batch_size_dev_set_or_model_is_refused(fits):
    results, _ = fits
    assert results["first"]["steps"] == 8
    other_batch, other_dev = results["other batch size"], results["other dev set"]
    assert "was trained with batch_size=8 × accumulation 1, this one has batch_size=4 × 1" in other_batch["error"]
    assert "the dev set has 12 samples, the run in" in other_dev["error"] and "evaluated on 16" in other_dev["error"]
    # Every pt.fit(model) run is task "model": the model itself tells them apart (before: a CheckpointError
    # after building everything, offering strict=False).
    other_model = results["other model"]
    assert other_model["error"].startswith("ConfigError: ") and "\n" not in other_model["error"], other_model
    assert "holds a run of another model, torch.nn.modules.linear.Linear" in other_model["error"]
    assert "this one is torch.nn.modules.container.Sequential" in other_model["error"]
    assert "fresh=True" in other_model["error"] and "strict" not in other_model["error"]
    same = results["same"]
    assert same["resumed_from_step"] == 8 and same["steps"] == 16 and same["epochs_done"] == 4


def test_find_unused_parameters_is_an_option_of_pt_fit(fits):
    # Before: reachable only through runtime=pt.Runtime(...), although DDP's error told users to pass it.
    results, _ = fits
    trained, refused = results["unused, find_unused_parameters"], results["unused"]
    assert trained["steps"] == 8, trained
    assert "pass find_unused_parameters=True (to pt.fit" in refused["error"], refused
