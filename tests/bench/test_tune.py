"""``paratrain bench --tune``: the search space, the one-factor-at-a-time order, the band, the choice, the
budget, the lines printed; on injected figures. Bad input through the CLI."""

from __future__ import annotations

import pytest

from paratrain.bench.tune import (FACTORS, Config, Outcome, Search, available_choices, check_budget, choose, confirmed, hopeless,
                                  default_config, fit_call, fits, fits_budget, metric_band, out_of_band, runtime_call,
                                  train_command)
from paratrain.cli.main import main
from paratrain.errors import ConfigError

ALL_PRECISIONS = {"bf16-mixed": None, "fp16-mixed": None}
LOSSES = (2.3, 2.1, 1.9, 1.7)


def test_only_what_runs_here_is_offered_and_the_rest_is_named():
    choices = available_choices(2, 64, {"bf16-mixed": None, "fp16-mixed": "no fp16 here"}, "no C++ compiler")
    assert choices.values["strategy"] == ("ddp", "fsdp", "single")
    assert choices.values["precision"] == ("32-true", "bf16-mixed")
    assert choices.values["compile"] == (False,)
    assert choices.values["grad_accum"] == (1, 2, 4)
    assert choices.left_out.pop("hsdp").startswith("2 processes on one machine make no 2-D mesh that shards")
    assert choices.left_out == {"fp16-mixed": "no fp16 here", "compile": "no C++ compiler"}
    one = available_choices(1, 6, ALL_PRECISIONS, None)
    assert one.values["strategy"] == ("single",) and one.values["grad_compression"] == ("none",)
    assert one.values["grad_accum"] == (1, 2)  # 6 samples do not split into 4 micro-batches
    assert one.values["compile"] == (False, True)


def test_hsdp_is_tried_on_a_2d_mesh_and_its_mesh_is_in_every_recommendation():
    four = available_choices(4, 64, ALL_PRECISIONS, None)
    assert four.values["strategy"] == ("ddp", "fsdp", "hsdp", "single") and "hsdp" not in four.left_out
    assert "hsdp" in available_choices(6, 60, ALL_PRECISIONS, None).values["strategy"]  # replicate 2 × shard 3
    assert "hsdp" in available_choices(3, 60, ALL_PRECISIONS, None).left_out
    assert "hsdp" not in available_choices(1, 60, ALL_PRECISIONS, None).left_out  # one process: no strategy at all
    hsdp = Config("hsdp", 4)
    assert hsdp.describe(64).startswith("hsdp × 4 (replicate 2 × shard 2) · 32-true")
    assert train_command(hsdp, "digits", 64).endswith("--strategy hsdp --precision 32-true --batch-size 16 --replicate 2")
    assert runtime_call(hsdp) == 'pt.Runtime(strategy="hsdp", precision="32-true", replicate=2)'
    assert fit_call(hsdp, "digits", 64).endswith("grad_accum=1, replicate=2)")
    asked, best, _ = run_search(lambda c: 300.0 if c.strategy == "hsdp" else 100.0, nproc=4)
    assert asked[1:4] == [Config("fsdp", 4), hsdp, Config("single", 1)] and best == hsdp


def test_candidates_that_cannot_run_are_never_asked_for():
    assert fits(Config("ddp", 2, grad_compression="bf16"), 64)
    assert not fits(Config("fsdp", 2, grad_compression="bf16"), 64)  # only DDP sends gradients through a hook
    assert not fits(Config("single", 1, grad_compression="fp16"), 64)
    assert not fits(Config("ddp", 2, grad_accum=4), 12)  # 6 per process: no 4 equal micro-batches


def run_search(speed, metrics: dict | None = None, losses: dict | None = None, nproc: int = 2, batch: int = 64):
    """Drive a Search with figures per candidate (``speed(config)``, losses, metrics); returns (order asked, recommendation, search)."""
    search = Search(default_config(nproc), available_choices(nproc, batch, ALL_PRECISIONS, None), batch, dev_samples=1000)
    asked = []
    while (config := search.next_config()) is not None:
        asked.append(config)
        search.record(config, Outcome(speed(config), (losses or {}).get(config, LOSSES), (metrics or {}).get(config, 0.9)))
    return asked, search.finish(), search


def test_the_default_first_then_one_factor_at_a_time_from_the_best_so_far():
    fsdp = Config("fsdp", 2)
    asked, best, _ = run_search(lambda c: 200.0 if c.strategy == "fsdp" else 100.0)
    assert asked[0] == default_config(2) == Config("ddp", 2)
    assert asked[1:3] == [fsdp, Config("single", 1)]  # the strategy factor first
    # Every later candidate changes one factor of the new best (fsdp), never the old default.
    assert all(c.strategy == "fsdp" for c in asked[3:])
    assert asked[3:5] == [Config("fsdp", 2, "bf16-mixed"), Config("fsdp", 2, "fp16-mixed")]
    assert best == fsdp
    assert len(asked) == len(set(asked))  # nothing measured twice
    # fsdp has no gradient hook: the compression factor offers nothing on top of it
    assert not any(c.grad_compression != "none" for c in asked)


def test_the_plan_bounds_the_runs():
    choices = available_choices(2, 64, ALL_PRECISIONS, None)
    asked, _, _ = run_search(lambda c: 100.0)
    assert len(asked) <= choices.plan_size() == 1 + 2 + 2 + 2 + 1 + 2


def test_improvements_add_up_over_factors():
    def speed(c):
        return 100.0 * (1.5 if c.precision == "bf16-mixed" else 1.0) * (1.2 if c.compile else 1.0)

    _, best, _ = run_search(speed)
    assert best == Config("ddp", 2, precision="bf16-mixed", compile=True)


def test_within_the_margin_the_simpler_configuration_stays():
    _, best, _ = run_search(lambda c: 102.0 if c.compile else 100.0)  # 2 %: one noisy run's difference
    assert best == default_config(2)
    assert choose(Config("ddp", 2), {Config("ddp", 2): 100.0, Config("fsdp", 2): 110.0}) == Config("fsdp", 2)


def test_a_fast_candidate_out_of_the_band_is_never_recommended():
    bad_accuracy = Config("ddp", 2, precision="fp16-mixed")
    other_training = Config("ddp", 2, grad_accum=2)
    _, best, search = run_search(
        lambda c: 500.0 if c in (bad_accuracy, other_training) else 100.0,
        metrics={bad_accuracy: 0.5},
        losses={other_training: (2.3, 2.0, 1.9, 1.7)})
    assert best == default_config(2)
    assert "dev metric 0.5000 below the default's 0.9000" in search.rejected[bad_accuracy]
    assert "loss differs from the default's" in search.rejected[other_training]


def test_the_band():
    default = Outcome(100.0, LOSSES, 0.90)
    fp32 = Config("ddp", 2, grad_accum=2)
    assert out_of_band(fp32, Outcome(120.0, (2.3, 2.1, 1.9, 1.70001), 0.90), default, 1000) is None  # rounding
    assert out_of_band(fp32, Outcome(120.0, (2.3, 2.2, 1.9, 1.7), 0.90), default, 1000).startswith("loss differs")
    # Mixed precision rounds on purpose: its losses are not held to parity, its dev metric is.
    bf16 = Config("ddp", 2, precision="bf16-mixed")
    assert out_of_band(bf16, Outcome(120.0, (2.3, 2.2, 1.95, 1.75), 0.89), default, 1000) is None
    assert out_of_band(bf16, Outcome(120.0, LOSSES, 0.85), default, 1000).startswith("dev metric")
    assert out_of_band(bf16, Outcome(None, error="exit code 1"), default, 1000) == "exit code 1"
    # Two standard errors of the dev metric, never less than a point.
    assert metric_band(0.9, 100) == pytest.approx(0.06)
    assert metric_band(0.99, 1_000_000) == 0.01


def test_a_failed_candidate_is_left_out_and_the_search_goes_on():
    asked, best, search = run_search(
        lambda c: None if c.precision == "fp16-mixed" else (130.0 if c.strategy == "single" else 100.0))
    failed = Config("single", 1, precision="fp16-mixed")
    assert search.rejected[failed] == "did not finish"
    assert best == Config("single", 1)
    later = asked[asked.index(failed) + 1:]
    assert {c.grad_accum for c in later} >= {2, 4} and any(c.compile for c in later)  # the next factors were searched


def test_the_budget_stops_a_run_that_would_not_end_in_time():
    assert fits_budget(0.0, [], 60.0)  # nothing measured yet: the default always runs
    assert fits_budget(30.0, [20.0], 60.0)  # 30 + 1.2 × 20 = 54
    assert not fits_budget(40.0, [20.0], 60.0)
    assert check_budget(1.5) == 90.0
    for bad in (None, 0.0, -3.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError):
            check_budget(bad)


def test_the_lines_to_use():
    best = Config("ddp", 2, precision="bf16-mixed", grad_accum=2, compile=True, grad_compression="fp16")
    assert train_command(best, "digits", 64) == ("paratrain train digits --nproc-per-node 2 --strategy ddp "
                                                 "--precision bf16-mixed --batch-size 16 --grad-accum 2 --compile "
                                                 "--grad-compression fp16")
    assert runtime_call(best) == 'pt.Runtime(strategy="ddp", precision="bf16-mixed", compile=True, grad_compression="fp16")'
    assert fit_call(best, "digits", 64) == ('pt.fit(\'digits\', strategy="ddp", precision="bf16-mixed", batch_size=16, '
                                            'grad_accum=2, compile=True, grad_compression="fp16")')
    one = Config("single", 1)
    assert train_command(one, "text-cls", 64, lr=1e-3) == ("paratrain train text-cls --nproc-per-node 1 --strategy single "
                                                          "--precision 32-true --batch-size 64 --lr 0.001")


def test_factors_are_searched_in_a_fixed_documented_order():
    assert FACTORS == ("strategy", "precision", "grad_accum", "compile", "grad_compression")


@pytest.mark.parametrize("words, message", [
    (["--tune"], "--tune needs --budget MINUTES"),
    (["--tune", "--budget", "0"], "--budget must be a positive number of minutes, got 0"),
    (["--tune", "--budget", "-2"], "--budget must be a positive number of minutes, got -2"),
    (["--budget", "5"], "--budget goes with --tune"),
    (["--tune", "--budget", "5", "--methods", "ddp"], "--tune: --methods does not go with it"),
    (["--tune", "--budget", "5", "--repeats", "3"], "--tune: --repeats does not go with it"),
    (["--tune", "--budget", "5", "--precision", "bf16-mixed"], "--tune: --precision does not go with it"),
    (["--tune", "--budget", "5", "--baseline", "ddp"], "--tune: --baseline does not go with it"),
    (["--tune", "--budget", "5", "--min-time", "-1"], "--min-time must be 0 or more seconds"),
])
def test_bad_tune_input_is_one_line_and_writes_nothing(words, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["bench", *words, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_the_winner_stands_only_if_its_median_still_wins():
    assert confirmed([130.0, 125.0], [100.0, 104.0])
    assert not confirmed([130.0, 80.0], [100.0, 104.0])  # one lucky run
    assert not confirmed([103.0, 104.0], [100.0, 101.0])  # within the margin


def test_tune_on_digits_through_the_cli(tmp_path):
    """One small real search (one process, a few steps, half a minute): the default runs first, every
    candidate is a real run with figures or an error, and the recommendation printed is one of the
    measured candidates in the band, with the lines to use."""
    import json
    import subprocess

    from tests.support import ROOT, clean_env, paratrain_cmd

    out = tmp_path / "tune"
    proc = subprocess.run(
        paratrain_cmd("bench", "--task", "digits", "--tune", "--budget", "0.5", "--nproc-per-node", "1", "--steps", "4",
                      "--warmup-steps", "1", "--min-time", "0", "--limit-eval", "100", "--out", str(out)),
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "tune.json").read_text())
    candidates = report["candidates"]
    assert candidates[0]["config"] == {"strategy": "single", "nproc": 1, "precision": "32-true", "grad_accum": 1,
                                       "compile": False, "grad_compression": "none"}
    assert all((c["samples_per_s"] or 0) > 0 or c["error"] for c in candidates)
    assert len(candidates) >= 2 or report["stopped"]  # the budget stopped it, or it ran past the default
    chosen = next(c for c in candidates if c["config"] == report["recommendation"])
    assert chosen["samples_per_s"] and not chosen["left_out"]
    assert "[tune 1/≤" in proc.stderr and "not tried: strategy: one process" in proc.stderr
    assert report["train_command"] in proc.stdout and report["runtime"] in proc.stdout and report["fit"] in proc.stdout
    assert report["train_command"].startswith("paratrain train digits --nproc-per-node 1 --strategy single")


def test_a_candidate_far_slower_than_the_best_is_stopped_early():
    # global batch 64; best 1000 samples/s; warm-up 10 steps of 50: judged after 10 measured steps
    assert not hopeless(19, 10, 1.0, 64, 1000.0, 50)  # 64 samples/s, but only 9 measured steps
    assert hopeless(20, 10, 1.0, 64, 1000.0, 50)  # 64 samples/s after a quarter of the run: under half of 1000
    assert not hopeless(20, 10, 0.1, 64, 1000.0, 50)  # 640 samples/s: could still be close
    assert not hopeless(14, 10, 1.0, 64, 1000.0, 12)  # never before 5 measured steps
    assert hopeless(15, 10, 1.0, 64, 1000.0, 12)
    assert not hopeless(50, 10, 1.0, 64, None, 50)  # the default itself: nothing to compare with
    assert not hopeless(50, 10, None, 64, 1000.0, 50)


def test_a_micro_batch_candidate_trains_what_the_default_trains(tmp_path):
    """The bench's loop with its per-process batch in 2 micro-batches (what --tune tries) takes the same
    steps as with one batch: the same per-step losses to the parity tolerance, one record per step."""
    import subprocess

    import torch

    from paratrain.bench.figures import read_records
    from paratrain.bench.methods import METHODS
    from paratrain.bench.parity import TOLERANCE, loss_parity
    from paratrain.bench.record import save_weights
    from paratrain.bench.settings import method_env
    from paratrain.bench.spec import BenchSpec
    from paratrain.tasks.api import TaskOptions
    from paratrain.tasks.registry import create_task
    from tests.support import ROOT

    task = create_task("digits", TaskOptions())
    torch.manual_seed(0)
    save_weights(task.build_model().state_dict(), tmp_path / "init.safetensors")
    spec = BenchSpec(task="digits", steps=6, global_batch=16, nproc=1, lr=task.recipe.lr,
                     weight_decay=task.recipe.weight_decay, seed=0, init_weights=str(tmp_path / "init.safetensors"))
    losses = {}
    for accumulation in (1, 2):
        work = tmp_path / f"accumulation-{accumulation}"
        work.mkdir()
        options = {"strategy": "single", "grad_accum": accumulation}
        spec_file = spec.for_method("single", "32-true", options, work).save(work)
        proc = subprocess.run(METHODS["single"].argv(spec_file, 1, "32-true"), cwd=ROOT, env=method_env(1),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        losses[accumulation] = read_records(work, 1)[0].step_losses
        assert ("2 micro-batches of 8 per process per step" in proc.stdout) == (accumulation == 2)
    assert len(losses[2]) == len(losses[1]) == 6
    assert loss_parity(losses[2], losses[1], steps=6) <= TOLERANCE
    assert losses[2][-1] < losses[2][0]  # it trained
