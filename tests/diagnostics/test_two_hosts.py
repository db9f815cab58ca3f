"""Two hosts in network namespaces: doctor on both, a training across them, and one host lost.

Uses the two_hosts fixture (tests/conftest.py: two network namespaces joined by a veth pair).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from tests.launch.processes import HANG_GUARD_S, finish, start
from tests.support import ROOT, clean_env, paratrain_cmd

FIT = str(ROOT / "tests" / "diagnostics" / "fit_script.py")


def _on(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def _node_args(rank: int, addr: str, port: int) -> list[str]:
    return ["--nnodes", "2", "--node-rank", str(rank), "--master-addr", addr, "--master-port", str(port)]


def _steps(out) -> int:
    path = out / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return max((json.loads(line)["step"] for line in lines if '"train"' in line), default=0)


def test_doctor_training_and_a_lost_host_across_two_namespaces(two_hosts, tmp_path):
    (ns0, _, addr0), (ns1, if1, _) = two_hosts
    env = clean_env()

    # 1. doctor on both hosts: ok, and an all_reduce across them with a measured bandwidth.
    doctors = finish([start(_on(ns, *paratrain_cmd("doctor", *_node_args(r, addr0, 29611), "--rdzv-timeout", "60", "--json")), env)
                      for r, ns in enumerate((ns0, ns1))])
    for doctor in doctors:
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        report = json.loads(doctor.stdout)
        assert report["ok"] and report["probe"]["world_size"] == 2 and report["probe"]["sum_ok"]
        assert report["probe"]["link"]["bus_bandwidth_Bps"] > 0
    route = {f["check"]: f for f in json.loads(doctors[1].stdout)["findings"]}["route to master"]
    assert route["status"] == "ok" and f"through {if1}" in route["detail"]

    # 2. a training across the two hosts.
    out = tmp_path / "fit"
    trained = finish([start(_on(ns, *paratrain_cmd("run", *_node_args(r, addr0, 29612), "--rdzv-timeout", "60",
                                                   FIT, str(out), "--steps", "6")), env)
                      for r, ns in enumerate((ns0, ns1))])
    assert [t.returncode for t in trained] == [0, 0], trained[0].stderr + trained[1].stderr
    assert json.loads((out / "summary.json").read_text())["world_size"] == 2

    # 3. host 1 is lost mid-run (every process of it killed): host 0 ends with one clear line, no hang.
    out = tmp_path / "lost"
    node0 = start(_on(ns0, *paratrain_cmd("run", *_node_args(0, addr0, 29613), "--rdzv-timeout", "60", FIT, str(out),
                                          "--steps", "100000")), env)
    node1 = subprocess.Popen(_on(ns1, *paratrain_cmd("run", *_node_args(1, addr0, 29613), "--rdzv-timeout", "60", FIT,
                                                     str(out), "--steps", "100000")),
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        while _steps(out) < 4:
            assert node0.poll() is None and node1.poll() is None, "the training ended before host 1 was lost"
            time.sleep(0.05)
        os.killpg(node1.pid, signal.SIGKILL)  # the launcher and its worker, as a host that loses power
        node1.wait(timeout=HANG_GUARD_S)
        [result] = finish([node0])
    finally:
        for proc in (node0, node1):
            if proc.poll() is None:
                proc.kill()
    assert result.returncode != 0
    last = result.stderr_lines[-1]
    assert last.startswith("paratrain run: error: rank 0 (local rank 0, host "), last
    assert "failed first" in last and "lost a peer inside a collective: another rank or host died" in last, last
