"""Two hosts in network namespaces: doctor on both, and a training across them.

Uses the two_hosts fixture (tests/conftest.py: two network namespaces joined by a veth pair).
"""

from __future__ import annotations

import json

from tests.launch.processes import finish, start
from tests.support import ROOT, clean_env, paratrain_cmd

FIT = str(ROOT / "tests" / "diagnostics" / "fit_script.py")


def _on(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def _node_args(rank: int, addr: str, port: int) -> list[str]:
    return ["--nnodes", "2", "--node-rank", str(rank), "--master-addr", addr, "--master-port", str(port)]


def test_doctor_and_a_training_across_two_namespaces(two_hosts, tmp_path):
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
