"""Loop shapes of real trainers (``tests/clients/loops.py``), stopped right after a save and resumed
on 2 real gloo processes: every sample trained as in the run that never stopped, in the same
order, and the same final weights bit for bit.

The prefetch shape runs on DeepSpeed's engine too (ZeRO-2, in the same job: its step goes through
``rt.step``), where DeepSpeed is installed.

Before the saved data position counted what the optimizer consumed, a batch drawn ahead of a save
(nanoGPT's prefetch, a save at the top of the body) was counted as trained and skipped on resume.
"""

from __future__ import annotations

import importlib.util

import pytest

import paratrain as pt
from tests.clients import loops

RUNS = [
    # save at iteration 3: epoch 0 trained whole, the drawn batch is epoch 1's first
    {"name": "prefetch", "shape": "prefetch", "steps": 5, "save_every": 3, "stop_at": 3},
    # save at iteration 2, mid-epoch; loader workers prefetch further than the loop draws
    {"name": "prefetch-workers", "shape": "prefetch", "steps": 4, "save_every": 2, "stop_at": 2, "num_workers": 1},
    # the global-order loader (one micro-batch per step): micro-batches counted in whole global batches
    {"name": "prefetch-global-order", "shape": "prefetch", "steps": 4, "save_every": 2, "stop_at": 2,
     "global_order": True},
    {"name": "top_save", "shape": "top_save", "steps": 9, "save_every": 4, "stop_at": 4},
    {"name": "iterations", "shape": "iterations", "steps": 7, "save_every": 2, "stop_at": 4},
    # DeepSpeed's engine (ZeRO-2) in the same job: its step goes through rt.step too
    {"name": "prefetch-deepspeed", "shape": "prefetch", "steps": 4, "save_every": 2, "stop_at": 2, "zero_stage": 2},
]
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None  # the deepspeed extra (in the test extra)
NEEDS_DEEPSPEED = pytest.mark.skipif(not HAS_DEEPSPEED, reason="strategy 'deepspeed' needs: pip install 'paratrain[deepspeed]'")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("clients")
    runs = [run for run in RUNS if HAS_DEEPSPEED or "zero_stage" not in run]
    return pt.spawn(loops.stop_and_resume, 2, args=(str(root), runs), timeout=240)


@pytest.mark.parametrize("name", [pytest.param(run["name"], marks=[NEEDS_DEEPSPEED] if "zero_stage" in run else [])
                                  for run in RUNS])
def test_a_run_stopped_after_a_save_and_resumed_trains_every_sample_once_in_order(results, name):
    result = results[name]
    assert result["resumed_from"] == next(run["stop_at"] for run in RUNS if run["name"] == name)
    for rank, (whole, resumed) in enumerate(zip(result["whole"], result["resumed"])):
        assert resumed == whole, f"rank {rank}: resumed run trained {resumed}, the uninterrupted one {whole}"
    assert result["same_weights"]
