"""One trajectory at any world size: a run stopped on 2 ranks and resumed on 1, 3 or 4 trains
the same model as the run that never stopped (pt.fit, real gloo processes, fp32, no dropout).

The run's global batch is 12 = 2 ranks × batch 3 × accumulation 2; resumed, it is split as
1 × 3 × 4, 3 × 2 × 2 and 4 × 3 × 1. Each epoch ends with a short global batch of 5 samples,
split unevenly (weighted by sample count). The stop falls mid-epoch. About 2 minutes on 2 cores
(7 jobs of 1 to 4 processes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import paratrain as pt
from tests.loop.elastic_workers import fit_tiny

OPTIONS = {"batch_size": 3, "grad_accum": 2}
STOP_AFTER = 3
RELATIVE = 1e-6


def step_losses(out_dir: Path) -> dict[int, float]:
    """The logged (all-ranks) loss of every step; a resumed attempt's record of a step wins."""
    losses = {}
    for line in (out_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "train":
            losses[record["step"]] = record["loss"]
    return losses


def worst_relative(got: dict[str, list[float]], want: dict[str, list[float]]) -> float:
    """Largest difference of a tensor's entries, relative to that tensor's largest entry."""
    worst = 0.0
    for name, reference in want.items():
        scale = max(abs(v) for v in reference)
        worst = max(worst, max(abs(a - b) for a, b in zip(got[name], reference)) / scale)
    return worst


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted 2-rank ddp run, and per strategy a 2-rank run stopped after STOP_AFTER steps (made once)."""
    root = tmp_path_factory.mktemp("elastic")
    full = pt.spawn(fit_tiny, 2, args=(str(root / "full"), None, OPTIONS), timeout=180)
    stopped = {}

    def stopped_run(strategy: str) -> Path:
        if strategy not in stopped:
            out_dir = root / f"stopped-{strategy}"
            result = pt.spawn(fit_tiny, 2, args=(str(out_dir), STOP_AFTER, {**OPTIONS, "strategy": strategy}),
                              timeout=180)
            assert result["steps"] == STOP_AFTER
            stopped[strategy] = out_dir
        return stopped[strategy]

    return root, full, stopped_run


# fsdp reshards its checkpoint (DCP) and reduce-scatters gradients; it must train the same model as ddp.
@pytest.mark.parametrize("strategy,world_size", [("ddp", 1), ("ddp", 3), ("ddp", 4), ("fsdp", 3)])
def test_a_run_resumed_on_another_world_size_trains_the_same_model(runs, strategy, world_size):
    root, full, stopped_run = runs
    assert full["steps"] == 10
    out_dir = root / f"resumed-{strategy}-{world_size}"
    shutil.copytree(stopped_run(strategy), out_dir)
    resumed = pt.spawn(fit_tiny, world_size, args=(str(out_dir), None, {**OPTIONS, "strategy": strategy}), timeout=180)
    assert resumed["resumed_from_step"] == STOP_AFTER and resumed["steps"] == 10
    assert resumed["world_size"] == world_size

    want, got = step_losses(root / "full"), step_losses(out_dir)
    assert sorted(got) == sorted(want) == list(range(1, 11))
    loss_error = max(abs(got[s] - want[s]) / abs(want[s]) for s in want)
    weight_error = worst_relative(resumed["weights"], full["weights"])
    print(f"{strategy} 2 -> {world_size} ranks: per-step loss {loss_error:.2e}, final weights {weight_error:.2e} (relative)")
    assert loss_error <= RELATIVE, (world_size, got, want)
    assert weight_error <= RELATIVE


def test_length_grouped_text_cls_resumed_on_three_ranks_trains_the_same_model(tmp_path):
    """Length groups are formed over the global batch, then split: the same groups at any world size."""
    from tests.loop.elastic_workers import fit_text

    full = pt.spawn(fit_text, 2, args=(str(tmp_path / "full"), None, OPTIONS), timeout=300)
    pt.spawn(fit_text, 2, args=(str(tmp_path / "resumed"), 2, OPTIONS), timeout=300)
    resumed = pt.spawn(fit_text, 3, args=(str(tmp_path / "resumed"), None, OPTIONS), timeout=300)
    assert resumed["resumed_from_step"] == 2 and resumed["steps"] == full["steps"] == 5

    want, got = step_losses(tmp_path / "full"), step_losses(tmp_path / "resumed")
    loss_error = max(abs(got[s] - want[s]) / abs(want[s]) for s in want)
    # Relative to the model's largest weight, not each tensor's: BERT's attention key biases have no
    # true gradient (softmax ignores a shift shared by all keys), so Adam turns their rounding noise
    # into steps of the learning rate's size, on values near 1e-7.
    scale = max(abs(v) for values in full["weights"].values() for v in values)
    weight_error = max(abs(a - b) for name, values in full["weights"].items()
                       for a, b in zip(resumed["weights"][name], values)) / scale
    print(f"text-cls 2 -> 3 ranks, grouped by length: per-step loss {loss_error:.2e}, final weights {weight_error:.2e}")
    assert sorted(got) == sorted(want) == [1, 2, 3, 4, 5]
    assert loss_error <= RELATIVE and weight_error <= RELATIVE
