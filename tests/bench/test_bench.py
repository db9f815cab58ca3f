"""``paratrain bench`` end to end on real processes: one run holds every kind of row."""

from __future__ import annotations

import json
import subprocess

import psutil
import pytest

from paratrain.bench.parity import TOLERANCE
from tests.support import ROOT, clean_env, paratrain_cmd

METHODS = "hangs,raises,absent,horovod,single,ddp,hsdp,lr-double,decayed-once,crashes-at-exit"


def assert_gone(pid: int) -> None:
    try:
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"process {pid} still runs"
    except psutil.NoSuchProcess:
        pass


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One bench of the example user task, two rounds: 4 measured rows, one that crashes at exit,
    a crash, a hang, two missing libraries."""
    tmp = tmp_path_factory.mktemp("bench")
    shadow = tmp / "shadow" / "horovod"  # a horovod without horovod.torch: "not installed", whatever this machine has
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    out = tmp / "out"
    env = clean_env(PARATRAIN_BENCH_PLUGINS="tests.bench.methods_for_tests")
    env["PYTHONPATH"] = f"{tmp / 'shadow'}:{env['PYTHONPATH']}"
    proc = subprocess.run(
        paratrain_cmd("bench", "--task", "examples.my_task:TASK", "--methods", METHODS, "--nproc-per-node", "2",
                      "--steps", "4", "--batch-size", "8", "--limit-train", "64", "--limit-eval", "40",
                      "--timeout", "300,hangs=5", "--repeats", "2", "--min-time", "0", "--out", str(out)),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "bench.json").read_text())
    return out, report, {row["method"]: row for row in report["rows"]}, proc


def test_every_method_is_a_row_in_the_given_order(bench):
    out, report, rows, proc = bench
    assert [row["method"] for row in report["rows"]] == METHODS.split(",")
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "bench.md").read_text()
    for name in METHODS.split(","):
        assert f"`{name}`" in table
        assert f"`{name}`" in proc.stdout  # the table is printed too


def test_fp32_methods_agree_with_single_and_a_different_lr_is_flagged(bench):
    _, report, rows, _ = bench
    for name in ("single", "ddp", "hsdp", "lr-double"):
        assert rows[name]["kind"] == "measured", rows[name]
    for name in ("ddp", "hsdp"):
        assert rows[name]["figures"]["processes"] == 2
        assert rows[name]["parity"] <= TOLERANCE and not rows[name]["parity_differs"], rows[name]
        assert not rows[name]["leaves_single"], rows[name]
    # On one machine the hsdp row runs an explicit 2-D mesh, and says what it does not show.
    assert any(note.startswith("mesh replicate 2 × shard 1 on one machine: the whole model on every rank")
               and "benchmarks/hsdp_link.py" in note for note in rows["hsdp"]["notes"]), rows["hsdp"]["notes"]
    assert rows["lr-double"]["parity"] > 100 * TOLERANCE
    assert rows["lr-double"]["parity_differs"]
    assert any("differs from single" in note for note in rows["lr-double"]["notes"])
    # The first step's loss comes before any update: the same for all, so the data and weights were the same.
    first = {name: rows[name]["figures"]["step_losses"][0] for name in ("single", "ddp", "lr-double")}
    assert first["ddp"] == pytest.approx(first["single"], rel=1e-6) and first["lr-double"] == pytest.approx(first["single"], rel=1e-6)
    for name in ("single", "ddp", "hsdp"):
        figures = rows[name]["figures"]
        assert len(figures["step_losses"]) == 4 and figures["samples_per_s"] > 0 and figures["peak_memory_bytes"] > 0
        assert 0 < figures["first_step_s"] < figures["wall_s"]
        assert rows[name]["dev"]["samples"] == 40  # every dev sample scored exactly once
    assert rows["single"]["speedup"] == 1.0


def test_weights_decayed_once_as_horovods_recipe_leaves_them_are_not_the_same_training(bench):
    """Horovod's documented ``broadcast_optimizer_state`` on a fresh optimizer takes a zero-gradient step
    whose weight decay stays: the losses pass the parity tolerance, yet they leave single's path by more
    than the reference pair does, and the row must say it trained something else (✗, red)."""
    out, _, rows, _ = bench
    decayed, ddp = rows["decayed-once"], rows["ddp"]
    assert decayed["kind"] == "measured", decayed
    assert decayed["parity"] <= TOLERANCE and not decayed["parity_differs"], decayed  # within the tolerance…
    assert decayed["leaves_single"] and decayed["departs_at_step"] == 1, decayed  # …and still caught
    assert any("not the same training" in note for note in decayed["notes"]), decayed["notes"]
    assert not ddp["parity_differs"] and not ddp["leaves_single"], ddp
    table = {line.split("|")[1].strip(): line for line in (out / "bench.md").read_text().splitlines() if line.startswith("| `")}
    assert "✗" in table["`decayed-once`"] and "✗" not in table["`ddp`"]


def test_crash_hang_and_missing_library_become_their_rows(bench):
    out, _, rows, _ = bench
    assert rows["raises"]["kind"] == "failed"
    assert rows["raises"]["error"] == "RuntimeError: boom: this method always fails"
    assert rows["hangs"]["kind"] == "timed out"
    assert "timed out after 5s" in rows["hangs"]["error"]
    for pid_file in (out / "methods" / "hangs").rglob("hang.*.pid"):  # the ranks that got as far as starting
        assert_gone(int(pid_file.name.split(".")[1]))
    assert rows["absent"]["kind"] == "not installed"
    assert "paratrain_no_such_library" in rows["absent"]["error"] and "pip install 'paratrain[bench]'" in rows["absent"]["error"]
    assert rows["horovod"]["kind"] == "not installed"
    assert "paratrain bench --install-horovod" in rows["horovod"]["error"]
    table = (out / "bench.md").read_text()
    assert "**timed out**" in table and "**failed**: RuntimeError: boom" in table and "**not installed**" in table


def test_hsdp_with_processes_that_make_no_2d_mesh_is_a_row_that_says_why(tmp_path, capsys):
    """In this process (no method starts): 3 processes make no replicate 2 × shard mesh."""
    import io

    from paratrain.bench.methods import METHODS as REGISTERED
    from paratrain.bench.session import Bench
    from paratrain.bench.settings import BenchSettings
    from paratrain.tasks.api import TaskOptions

    said = io.StringIO()
    settings = BenchSettings(task="examples.my_task:TASK", methods=[REGISTERED["hsdp"]], out=tmp_path, nproc=3, steps=4,
                             global_batch=6, task_options=TaskOptions(limit_train=48, limit_eval=20), repeats=1,
                             min_time_s=0)
    [row] = Bench(settings, said).run().rows
    why = ("hsdp's 2-D mesh here is replicate 2 × shard --nproc-per-node/2, and 3 process(es) do not split in 2; "
           "use an even --nproc-per-node")
    assert (row.kind, row.error, row.runs, row.notes) == ("not run", why, [], [])
    assert f"hsdp              {why}" in said.getvalue() and f"**not run**: {why}" in capsys.readouterr().out
    assert not (tmp_path / "methods" / "hsdp").exists()  # never started


def test_a_terminated_bench_takes_the_running_method_with_it(tmp_path):
    """SIGTERM to the bench while a method runs: the method's whole tree goes, the bench exits 130."""
    import signal
    import time

    out = tmp_path / "out"
    proc = subprocess.Popen(
        paratrain_cmd("bench", "--task", "examples.my_task:TASK", "--methods", "hangs", "--steps", "2",
                      "--limit-train", "16", "--limit-eval", "8", "--batch-size", "4", "--out", str(out)),
        cwd=ROOT, env=clean_env(PARATRAIN_BENCH_PLUGINS="tests.bench.methods_for_tests"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    method_dir = out / "methods" / "hangs"
    deadline = time.monotonic() + 300
    while len(list(method_dir.rglob("hang.*.pid"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = [int(path.name.split(".")[1]) for path in method_dir.rglob("hang.*.pid")]
    if len(workers) != 2:
        proc.kill()
        pytest.fail(f"the method's workers did not start: {proc.communicate()}")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "paratrain bench: interrupted" in err
    for pid in workers:
        assert_gone(pid)
    assert not (out / "bench.md").exists()


def test_two_rounds_in_rotated_order_give_every_figure_a_range_and_a_verdict(bench):
    out, report, rows, _ = bench
    table = (out / "bench.md").read_text()
    running = ["single", "ddp", "hsdp", "lr-double", "decayed-once", "crashes-at-exit"]  # hangs and raises ended in round 1
    def order(round_number):
        runs = [(run["started"], name) for name in running for run in rows[name]["runs"] if run["round"] == round_number]
        return [name for _, name in sorted(runs)]
    assert order(1) == running and order(2) == running[1:] + running[:1]
    assert [run["round"] for run in rows["hangs"]["runs"]] == [1]  # not run again after timing out
    speeds = {}
    for name in running:
        runs = rows[name]["runs"]
        assert [run["kind"] for run in runs] == ["measured", "measured"], runs
        spread = rows[name]["spreads"]["samples_per_s"]
        values = sorted(run["samples_per_s"] for run in runs)
        assert (spread["low"], spread["high"], spread["n"]) == (values[0], values[1], 2)
        assert spread["median"] == pytest.approx(sum(values) / 2)
        for run in runs:
            assert run["window_s"] > 0 and set(run["load"]) == {"before", "during", "after"}
        speeds[name] = spread["median"]
    # The baseline is the fastest of the methods that trained what single trained: lr-double and
    # decayed-once trained something else, however fast they ran.
    fastest = max((name for name in speeds if name not in ("lr-double", "decayed-once")), key=speeds.get)
    assert report["settings"]["baseline"] == fastest and rows[fastest]["verdict"] == "baseline"
    by_round = {name: {run["round"]: run["samples_per_s"] for run in rows[name]["runs"]} for name in running}
    for name in running:
        assert rows[name]["verdict"] in ("baseline", "faster", "slower", "indistinguishable")
        if name != fastest:  # beside the verdict: its samples/s over the baseline's, round by round
            ratios = sorted(by_round[name][r] / by_round[fastest][r] for r in (1, 2))
            ratio = rows[name]["vs_baseline"]
            assert (ratio["low"], ratio["high"], ratio["n"]) == pytest.approx((ratios[0], ratios[1], 2))
            assert f"{rows[name]['verdict']} · {ratio['median']:.2f}× (" in table


def test_a_method_that_crashed_at_exit_is_measured_with_the_crash_quoted(bench):
    out, _, rows, _ = bench
    row = rows["crashes-at-exit"]
    assert row["kind"] == "measured" and row["parity"] <= TOLERANCE and row["dev"]["samples"] == 40
    notes = [note for note in row["notes"] if "crashed at exit after writing its results" in note]
    assert len(notes) == 2 and all("terminate called without an active exception" in note for note in notes), row["notes"]
    assert "ChildFailedError" not in (out / "bench.md").read_text()
