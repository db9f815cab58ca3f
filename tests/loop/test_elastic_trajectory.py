"""One trajectory at any world size: a run stopped on 2 ranks and resumed on 1, 3 or 4 trains
the same model as the run that never stopped (pt.fit, real gloo processes, fp32, no dropout).

The run's global batch is 12 = 2 ranks × batch 3 × accumulation 2; resumed with the same options,
it is split as 1 × 3 × 4 and 3 × 2 × 2; resumed on 4 with batch 1 × accumulation 3 (another split
of the same global batch, asked for), as 4 × 1 × 3. Each epoch ends with a short global batch of
5 samples, split unevenly (weighted by sample count). The stop falls mid-epoch. ddp, fsdp and
deepspeed ZeRO-2 (which divides the loss by its accumulation cycle itself) are compared with the
one uninterrupted ddp run. The fits of one world size share one job (one start of its processes):
6 jobs of 1 to 4 processes in all.
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest

import paratrain as pt
from tests.loop.elastic_workers import fits_in_one_job, step_losses, worst_relative

OPTIONS = {"batch_size": 3, "grad_accum": 2}
STOP_AFTER = 3
RELATIVE = 1e-6


DEEPSPEED_MISSING = importlib.util.find_spec("deepspeed") is None
DEEPSPEED = pytest.mark.skipif(DEEPSPEED_MISSING, reason="strategy 'deepspeed' needs: pip install 'paratrain[deepspeed]'")

# fsdp reshards its checkpoint (DCP) and reduce-scatters gradients; deepspeed's engine divides the loss
# by its accumulation cycle and averages over ranks itself: each must train the same model as ddp.
CASES = [("ddp", 1, {}), ("ddp", 3, {}), ("ddp", 4, {"batch_size": 1, "grad_accum": 3}), ("fsdp", 3, {}),
         ("deepspeed", 1, {}), ("deepspeed", 3, {})]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted 2-rank ddp run, per strategy a 2-rank run stopped after STOP_AFTER steps, and each
    case's run resumed from its strategy's stopped one: one job per world size (several fits in each)."""
    root = tmp_path_factory.mktemp("elastic")
    strategies = [s for s in dict.fromkeys(s for s, _, _ in CASES) if s != "deepspeed" or not DEEPSPEED_MISSING]
    first = pt.spawn(fits_in_one_job, 2, args=([("fit_tiny", str(root / "full"), None, OPTIONS)] + [
        ("fit_tiny", str(root / f"stopped-{s}"), STOP_AFTER, {**OPTIONS, "strategy": s}) for s in strategies],),
        timeout=300)
    full, stopped = first[0], dict(zip(strategies, first[1:], strict=True))
    resumed = {}
    for world_size in sorted({n for s, n, _ in CASES if s in strategies}):
        cases = [(s, n, split) for s, n, split in CASES if n == world_size and s in strategies]
        for strategy, _, _ in cases:
            shutil.copytree(root / f"stopped-{strategy}", root / f"resumed-{strategy}-{world_size}")
        results = pt.spawn(fits_in_one_job, world_size, args=([
            ("fit_tiny", str(root / f"resumed-{s}-{n}"), None, {**OPTIONS, "strategy": s, **split})
            for s, n, split in cases],), timeout=300)
        resumed.update({(s, n): result for (s, n, _), result in zip(cases, results, strict=True)})
    return root, full, stopped, resumed


@pytest.mark.parametrize("strategy,world_size", [
    pytest.param(s, n, marks=DEEPSPEED) if s == "deepspeed" else (s, n) for s, n, _ in CASES])
def test_a_run_resumed_on_another_world_size_trains_the_same_model(runs, strategy, world_size):
    root, full, stopped, resumed = runs
    assert full["steps"] == 10
    assert stopped[strategy]["steps"] == STOP_AFTER
    result = resumed[strategy, world_size]
    out_dir = root / f"resumed-{strategy}-{world_size}"
    assert result["resumed_from_step"] == STOP_AFTER and result["steps"] == 10
    assert result["world_size"] == world_size

    want, got = step_losses(root / "full"), step_losses(out_dir)
    assert sorted(got) == sorted(want) == list(range(1, 11))
    loss_error = max(abs(got[s] - want[s]) / abs(want[s]) for s in want)
    weight_error = worst_relative(result["weights"], full["weights"])
    print(f"{strategy} 2 -> {world_size} ranks: per-step loss {loss_error:.2e}, final weights {weight_error:.2e} (relative)")
    assert loss_error <= RELATIVE, (world_size, got, want)
    assert weight_error <= RELATIVE


def test_length_grouped_text_cls_resumed_on_three_ranks_trains_the_same_model(tmp_path):
    """Length groups are formed over the global batch, then split: the same groups at any world size."""
    from tests.loop.elastic_workers import fit_text

    full, stopped = pt.spawn(fits_in_one_job, 2, args=([("fit_text", str(tmp_path / "full"), None, OPTIONS),
                                                        ("fit_text", str(tmp_path / "resumed"), 2, OPTIONS)],),
                             timeout=300)
    assert stopped["steps"] == 2
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
