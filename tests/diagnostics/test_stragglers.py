"""The straggler detector: its verdicts on made-up timings, and one real 2-rank run slowed for real — rank 1's loader
sleeping, then rank 1's process under a CPU quota (cgroup) — named with the slow part and host, and nothing
while the run is clean."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from paratrain.diagnostics.step_phases import PhaseClock
from paratrain.diagnostics.stragglers import RankInterval, StragglerWatch, slow_ranks
from paratrain.loop.run_log import read_records
from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, paratrain_cmd

SCRIPT = str(ROOT / "tests" / "diagnostics" / "straggler_script.py")


def _interval(rank, data=0.1, compute=1.0, communication=0.2, link=math.nan, steps=100):
    return RankInterval(rank, f"host{rank}", steps, data, compute, communication, link)


def test_a_rank_slow_for_three_judged_intervals_is_named_once_with_its_part_then_its_recovery():
    watch = StragglerWatch()
    clean = [_interval(r) for r in range(4)]
    assert all(watch.observe(clean, step) == [] for step in range(3))
    slow = [*clean[:2], _interval(2, compute=1.3), clean[3]]
    said = [watch.observe(slow, step) for step in range(3, 7)]
    assert said[:2] == [[], []] and said[3] == []
    assert said[2] == ["straggler: rank 2 (host2) is 27% slower than the median rank for 3 log intervals: compute "
                       "13.0 ms per step (median 10.0 ms) — its CPU/GPU is slower or shared: other jobs, a CPU quota, "
                       "throttling"]
    assert watch.observe(clean, 7) == ["straggler: rank 2 (host2) is back within 10% of the median rank's compute"]
    assert watch.summary() == [{"rank": 2, "host": "host2", "part": "compute", "first_step": 5, "intervals": 4,
                                "slower": 0.273, "last_step": 6}]
    # 9 % is not 10 %; a slow link needs 2 ms more than the median (not loopback against a LAN); data vs compute.
    assert slow_ranks([*clean[:3], _interval(3, compute=1.09)]) == {}
    links = [_interval(r, link=0.0002 if r == 0 else 0.0011) for r in range(3)]
    assert slow_ranks(links) == {}
    assert slow_ranks([*links[:2], _interval(2, link=0.0211)])[2].part == "link"
    assert slow_ranks([*clean[:3], _interval(3, data=0.5)])[3].part == "data"
    # Intervals shorter than a second of work are pooled before a verdict.
    short = StragglerWatch()
    quick = [_interval(0, compute=0.2), _interval(1, compute=0.4)]
    assert [bool(short.observe(quick, s)) for s in range(15)].count(True) == 1


@contextmanager
def cpu_quota(pid: int, fraction: float):
    """Put process ``pid`` under a CPU quota of ``fraction`` of one CPU: cgroup v2 ``cpu.max`` where the cpu
    controller is on v2, else cgroup v1's ``cpu.cfs_quota_us``."""
    v2 = Path("/sys/fs/cgroup")
    if "cpu" in ((v2 / "cgroup.controllers").read_text().split() if (v2 / "cgroup.controllers").exists() else []):
        parent, limit = v2, lambda group: (group / "cpu.max").write_text(f"{int(fraction * 100_000)} 100000")
    elif (v2 / "cpu" / "cpu.cfs_quota_us").exists():
        parent = v2 / "cpu"

        def limit(group):
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text(str(int(fraction * 100_000)))
    else:
        pytest.skip("no cgroup cpu controller here")
    group = parent / f"paratrain-test-{os.getpid()}-{pid}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup under {parent}: {exc}")
    try:
        limit(group)
        (group / "cgroup.procs").write_text(str(pid))
        yield
    finally:
        try:
            (parent / "cgroup.procs").write_text(str(pid))
        except OSError:
            pass  # the process ended
        group.rmdir()


def _stragglers(out: Path) -> list[dict]:
    return [r for r in read_records(out / "metrics.jsonl") if r.get("event") == "straggler"]


def _wait(launcher, what, until, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not (found := until()):
        assert launcher.poll() is None, launcher.communicate()[0]
        assert time.monotonic() < deadline, f"no {what} after {timeout:g}s"
        time.sleep(0.1)
    return found


def test_a_slow_loader_then_a_cpu_quota_on_rank_1_are_named_and_a_clean_run_is_not(tmp_path, cli_env):
    out, flags = tmp_path / "run", tmp_path / "flags"
    flags.mkdir()
    launcher = subprocess.Popen(paratrain_cmd("run", "--nproc-per-node", "2", SCRIPT, str(out), str(flags)),
                                cwd=ROOT, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    appeared = {}
    try:
        # Clean: ~5 judged intervals (1 s of work each) without a word.
        first = _wait(launcher, "training", lambda: [r for r in read_records(out / "metrics.jsonl")
                                                     if r.get("event") == "ranks"])
        _wait(launcher, "5 s of training", lambda: [r for r in read_records(out / "metrics.jsonl")
                                                   if r.get("event") == "ranks" and r["time"] > first[0]["time"] + 5])
        assert _stragglers(out) == [], _stragglers(out)
        (flags / "slow-data").touch()
        started = time.monotonic()
        _wait(launcher, "a data straggler", lambda: [r for r in _stragglers(out) if "data wait" in r["line"]])
        appeared["data"] = time.monotonic() - started
        (flags / "slow-data").unlink()
        with cpu_quota(int((flags / "pid-rank1").read_text()), 0.1):
            started = time.monotonic()
            _wait(launcher, "a compute straggler",
                  lambda: [r for r in _stragglers(out) if "compute" in r["line"] and "slower" in r["line"]])
            appeared["compute"] = time.monotonic() - started
        (flags / "stop").touch()
        output, _ = launcher.communicate(timeout=HANG_GUARD_S)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, output
    lines = [r["line"] for r in _stragglers(out)]
    print(f"appeared after {appeared}:", *lines, sep="\n")
    assert lines[0].startswith("straggler: rank 1 (") and "data wait" in lines[0], lines
    assert any(line.startswith("straggler: rank 1 (") and ": compute" in line for line in lines), lines
    assert all("rank 0" not in line for line in lines), lines
    summary = json.loads((out / "summary.json").read_text())["stragglers"]
    assert {(s["rank"], s["part"]) for s in summary} == {(1, "data"), (1, "compute")}
    # The per-rank curves are in the run's TensorBoard.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard")).Reload()
    assert {"rank_samples_per_s/rank0", "rank_samples_per_s/rank1", "rank_compute_ms/rank1"} <= set(events.Tags()["scalars"])


def test_the_phase_clock_splits_a_step():
    clock = PhaseClock()
    for phase, seconds in (("data", 0.02), ("forward", 0.01), ("optimizer", 0.01), ("logging", 0.03)):
        clock.enter(phase)
        time.sleep(seconds)
    clock.enter("data")
    steps, (data, compute, communication) = clock.take()
    assert steps == 1 and data >= 0.02 and 0.02 <= compute < 0.03 and communication == 0.0
