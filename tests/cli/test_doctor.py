"""`paratrain doctor` on this machine: findings, the fix for a problem, and a real 2-process all_reduce."""

from __future__ import annotations

import json

from tests.launch.processes import run_all
from tests.support import clean_env, paratrain_cmd


def test_doctor_reports_ok_and_a_measured_all_reduce():
    [healthy] = run_all([paratrain_cmd("doctor", "--nproc-per-node", "2", "--json")])
    assert healthy.returncode == 0, healthy.stderr
    report = json.loads(healthy.stdout)
    checks = {f["check"]: f for f in report["findings"]}
    for name in ("python", "torch", "gloo", "CUDA", "NCCL", "cpu", "environment", "interfaces"):
        assert name in checks, name
    probe = report["probe"]
    assert report["ok"] and probe["world_size"] == 2 and probe["sum_ok"] and probe["backend"] == "gloo"
    assert probe["link"]["bus_bandwidth_Bps"] > 0 and probe["link"]["latency_s"] > 0
    assert checks["all_reduce probe"]["status"] == "ok" and "bus bandwidth" in checks["all_reduce probe"]["detail"]


def test_doctor_names_a_problem_and_exits_non_zero():
    [run] = run_all([paratrain_cmd("doctor")], env=clean_env(GLOO_SOCKET_IFNAME="eth-nowhere", RANK="3"))
    assert run.returncode == 1
    assert "[problem] GLOO_SOCKET_IFNAME: names interface(s) eth-nowhere that do not exist here" in run.stdout
    assert "fix: unset GLOO_SOCKET_IFNAME or name one of those" in run.stdout
    assert "[problem] launcher variables: RANK set in this shell" in run.stdout
    assert run.stdout.strip().endswith("2 problem(s)")
