"""Desync guards on 2 real processes: ranks that would train different things fail at setup, naming them."""

from __future__ import annotations

import subprocess

import paratrain as pt
from tests.diagnostics.desync_workers import differing_ranks
from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, paratrain_cmd


def test_different_models_configs_and_dataset_lengths_fail_at_setup_on_every_rank():
    messages, same_everywhere = pt.spawn(differing_ranks, nprocs=2)
    assert same_everywhere  # the same error on every rank: nobody is left waiting
    model, config, data = messages
    assert model == ("DistributedError: ranks disagree at setup: the model differs: parameter #0 is weight (3, 4) "
                     "float32 on rank 0 but weight (5, 4) float32 on rank 1; build the same model on every rank")
    assert config.startswith("DistributedError: ranks disagree at setup: the config differs: epochs (rank 0: 3, rank 1: 4)")
    assert data.startswith("DataError: dataset length differs across ranks (rank 0: 10, rank 1: 11)")


def test_pt_fit_with_a_different_option_on_one_rank_stops_at_setup_naming_it(tmp_path, cli_env):
    script = str(ROOT / "tests" / "diagnostics" / "fit_script.py")
    run = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", script, str(tmp_path / "run"), "--lr-on-rank-1", "0.3"),
                         env=cli_env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("paratrain run: error: rank ") and "failed first" in last
    assert "ranks disagree at setup: the config differs: fit.lr (rank 0: 0.05, rank 1: 0.3)" in last
    assert not list((tmp_path / "run").glob("checkpoints/step-*"))  # nothing trained, nothing saved
