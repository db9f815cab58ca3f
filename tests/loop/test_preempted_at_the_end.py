"""A stop signal after the last step (during the final evaluation or save) on two real processes.

Before: the fit loop's SIGTERM handler was gone by then, so the signal killed the worker mid-way
and the launcher said "stopped by SIGTERM; the workers were stopped too" (exit 143) about a run
that had finished its steps.
"""

from __future__ import annotations

import json

import pytest

import paratrain as pt
from paratrain.checkpoint import catalog
from paratrain.errors import WorkerError
from tests.loop.workers import fit_sigterm_after_the_last_step


def test_sigterm_in_the_final_evaluation_finishes_saves_and_says_preempted_on_every_rank(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(WorkerError) as caught:
        pt.spawn(fit_sigterm_after_the_last_step, 2, args=(str(out),), timeout=180)
    message = str(caught.value)
    assert "PreemptedError" in message
    assert "preempted by a signal on another rank after the last step (8): checkpoint at step 8" in message \
        or "preempted by SIGTERM after the last step (8): checkpoint at step 8" in message
    assert "the run is complete" in message
    saved = [path.name for path, _ in catalog.complete(out / "checkpoints")]
    assert saved[-1] == "step-000008"  # the final save happened after the signal
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["best_metrics"]

