"""The straggler detector: its verdicts on made-up timings, and real 2-rank runs slowed for real — rank 1's loader
sleeping, then rank 1's process under a CPU quota (cgroup); and rank 1's host's link saturated (two network
namespaces) — named with the slow part and host, and nothing while the run is clean."""

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
    for phase, seconds in (("data", 0.02), ("forward", 0.01), ("optimizer", 0.01), ("logging", 0.3)):
        clock.enter(phase)
        time.sleep(seconds)
    clock.enter("data")
    steps, (data, compute, communication) = clock.take()
    # The logging's 0.3 s is in no part (a sleep's overshoot on a busy machine stays far below it).
    assert steps == 1 and 0.02 <= data < 0.3 and 0.02 <= compute < 0.3 and communication == 0.0


def test_a_saturated_link_on_one_host_names_that_rank_and_its_link(tmp_path, two_hosts):
    """Two hosts in network namespaces; once the run is clean, node 1's end of the veth pair is limited to
    50 Mbit/s (a token bucket: this kernel has no netem for a plain delay). The gradient all-reduce (1.2 MB
    a step) then fills that link, and node 1's store round trips queue behind it: rank 1's link, not its
    own work, is what is slow."""
    from tests.diagnostics.test_two_hosts import _node_args, _on
    from tests.launch.processes import start
    from tests.support import clean_env

    (ns0, _, addr0), (ns1, if1, addr1) = two_hosts
    out, flags = tmp_path / "run", tmp_path / "flags"
    flags.mkdir()
    nodes = [start(_on(ns, *paratrain_cmd("run", *_node_args(r, addr0, 29631), "--rdzv-timeout", "60", SCRIPT,
                                          str(out), str(flags))), clean_env())
             for r, ns in enumerate((ns0, ns1))]
    launcher = nodes[0]
    try:
        _wait(launcher, "training", lambda: [r for r in read_records(out / "metrics.jsonl") if r.get("event") == "ranks"])
        subprocess.run(["tc", "-n", ns1, "qdisc", "replace", "dev", if1, "root", "tbf", "rate", "50mbit",
                        "burst", "64kb", "latency", "100ms"], check=True)
        started = time.monotonic()
        found = _wait(launcher, "a link straggler", lambda: [r for r in _stragglers(out) if "link" in r["line"]])
        appeared = time.monotonic() - started
        (flags / "stop").touch()
        outputs = [node.communicate(timeout=HANG_GUARD_S)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert [node.returncode for node in nodes] == [0, 0], outputs
    lines = [r["line"] for r in _stragglers(out)]
    print(f"appeared after {appeared:.1f}s:", *lines, sep="\n")
    assert found[0]["line"].startswith("straggler: rank 1 (") and f"@{addr1}) is" in found[0]["line"], lines
    assert all("rank 0" not in line for line in lines), lines


def test_a_link_bound_run_is_judged_on_its_links_after_seconds_not_minutes():
    """5 ms of own work and 200 ms of waiting a step: own work would pool for a minute; the links are judged
    every 3 s of steps, on the median of the intervals' fastest round trips (one idle moment is not the link)."""
    watch = StragglerWatch()

    def interval(rank, link):
        return RankInterval(rank, f"host{rank}", 10, 0.002, 0.05, 2.0, link)

    said = []
    for step, lucky in zip(range(10, 70, 10), (False, False, True, False, False, False)):
        said += watch.observe([interval(0, 0.0002), interval(1, 0.0005 if lucky else 0.015)], step)
    assert said == ["straggler: rank 1 (host1) is 97% slower than the median rank for 3 log intervals: link 15.0 ms "
                    "per round trip to the job's store (median 7.6 ms) — its network path to node 0 is slow: check "
                    "that host's interface and route"], said
    # Own-work parts are not judged on intervals that short: rank 0's noisy compute says nothing.
    noisy = StragglerWatch()
    assert all(noisy.observe([RankInterval(0, "h0", 10, 0.002, 0.09, 2.0, 0.001),
                              RankInterval(1, "h1", 10, 0.002, 0.03, 2.0, 0.001)], s) == [] for s in range(12))


def test_a_rank_slowed_by_a_cpu_quota_is_named_though_the_others_mostly_wait_for_it():
    """Rank 1 under a CPU quota computes 18 ms a step; rank 0 computes 1.5 ms and waits 40 ms for it. Each rank's own
    work (10 ms a step at the median) takes 100 steps to add up to a judged second, while the links are judged
    every 3 s of steps (73 steps): the links' verdicts must not empty the own-work pool, or rank 1 is never named."""
    from paratrain.diagnostics.stragglers import RankInterval, StragglerWatch

    watch, lines = StragglerWatch(), []
    for interval in range(60):
        steps = 10
        ranks = [RankInterval(0, "a", steps, 0.00015 * steps, 0.0015 * steps, 0.040 * steps, link_s=0.0001),
                 RankInterval(1, "b", steps, 0.0002 * steps, 0.018 * steps, 0.023 * steps, link_s=0.0001)]
        lines += watch.observe(ranks, step=steps * (interval + 1))
    assert len(lines) == 1 and lines[0].startswith("straggler: rank 1 (b) is") and ": compute" in lines[0], lines
