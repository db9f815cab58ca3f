"""``ckpt.resume()`` in an own loop on ``rt.loader(..., global_order=True, grad_accum=2)``: a run
stopped on 2 ranks (global batch 12 = 2 × 3 × 2) and resumed on 1 or 3 trains the same model as
the run that never stopped, and rank 0 says in one line how the global batch is split now. A
global batch the new world size cannot split is refused in one line, exit non-zero, checkpoints
untouched (real gloo processes, fp32, no dropout).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

import paratrain as pt
from tests.checkpoint import elastic_loop
from tests.loop.elastic_workers import worst_relative
from tests.support import ROOT, paratrain_cmd

STOP_AFTER = 3
RELATIVE = 1e-6
SCRIPT = str(ROOT / "tests" / "checkpoint" / "elastic_loop.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted 2-rank run (10 steps) and one stopped after STOP_AFTER steps (made once)."""
    root = tmp_path_factory.mktemp("own-loop")
    whole = pt.spawn(elastic_loop.reference_and_stopped, 2,
                     args=(str(root / "whole"), str(root / "stopped"), 3, 2, STOP_AFTER), timeout=180)
    return root, whole


@pytest.mark.parametrize("world_size,micro_batch,accumulation", [(1, 3, 4), (3, 2, 2)])
def test_an_own_loop_resumed_on_another_world_size_trains_the_same_model(runs, world_size, micro_batch, accumulation):
    root, whole = runs
    directory = root / f"resumed-{world_size}"
    shutil.copytree(root / "stopped", directory)
    resumed = pt.spawn(elastic_loop.train, world_size, args=(str(directory), 3, 2), timeout=180)
    assert resumed["resumed_from"] == STOP_AFTER and resumed["steps"] == whole["steps"] == 10
    assert resumed["split"] == [micro_batch, accumulation, 12]
    said = [line for line in resumed["said"] if line.startswith("the run's global batch")]
    assert said == [f"the run's global batch of 12 samples is kept (2 process(es) × batch 3 × accumulation 2 when "
                    f"saved): now {world_size} process(es) × batch {micro_batch} × accumulation {accumulation}, "
                    "the same trajectory"], resumed["said"]
    error = worst_relative(resumed["weights"], whole["weights"])
    print(f"own loop 2 -> {world_size} ranks: final weights {error:.2e} (relative)")
    assert error <= RELATIVE


def test_a_global_batch_the_new_world_size_cannot_split_is_refused_in_one_line(runs, tmp_path, cli_env):
    root, _ = runs
    directory = tmp_path / "run"
    shutil.copytree(root / "stopped", directory)
    before = {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()}
    done = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "5", SCRIPT, str(directory), "--batch-size", "3",
                                        "--grad-accum", "2"), env=cli_env, capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-3000:]
    refusals = [line for line in said.splitlines() if "cannot be split over 5 processes" in line]
    assert refusals, said[-3000:]
    print(refusals[0])
    assert "the run's global batch of 12 samples" in refusals[0] and "run on 1, 2, 3, 4, 6, 12 process(es)" in refusals[0]
    assert {path: path.read_bytes() for path in directory.rglob("*") if path.is_file()} == before
