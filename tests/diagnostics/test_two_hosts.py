"""Two hosts in network namespaces: doctor on both, a training across them, and one host lost.

Uses the two_hosts fixture (tests/conftest.py: two network namespaces joined by a veth pair).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time

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
        mesh = {f["check"]: f for f in report["findings"]}["hsdp mesh"]["detail"]  # the nodes as the ranks saw them
        assert mesh == ("2 process(es) on 2 node(s) → replicate 2 × shard 1 (ranks 0, 1 each hold one replica's "
                        "shards), a node each")
    route = {f["check"]: f for f in json.loads(doctors[1].stdout)["findings"]}["route to master"]
    assert route["status"] == "ok" and f"through {if1}" in route["detail"]

    # 2. a training across the two hosts.
    out = tmp_path / "fit"
    trained = finish([start(_on(ns, *paratrain_cmd("run", *_node_args(r, addr0, 29612), "--rdzv-timeout", "60",
                                                   FIT, str(out), "--steps", "6")), env)
                      for r, ns in enumerate((ns0, ns1))])
    assert [t.returncode for t in trained] == [0, 0], trained[0].stderr + trained[1].stderr
    assert json.loads((out / "summary.json").read_text())["world_size"] == 2
    for node in trained:  # torch's C++ noise stays out of the lines users read (--verbose shows it)
        assert "hostname of the client socket cannot be retrieved" not in node.stderr, node.stderr


def _steps(out) -> int:
    path = out / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return max((json.loads(line)["step"] for line in lines if '"train"' in line), default=0)


def _power_off(host_namespace: str, interface: str) -> None:
    """The host dies: its link goes dark first (no goodbye packet), then every process in it is killed."""
    subprocess.run(["ip", "-n", host_namespace, "link", "set", interface, "down"], check=True)
    for pid in subprocess.run(["ip", "netns", "pids", host_namespace], capture_output=True, text=True).stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def _lose_node_1(nodes, out, after_steps: int, namespace: str, interface: str):
    """Power node 1 off once the training logged ``after_steps``; node 0's result."""
    try:
        while _steps(out) < after_steps:
            assert all(node.poll() is None for node in nodes), "the training ended before the host was lost"
            time.sleep(0.05)
        _power_off(namespace, interface)
        [survivor] = finish([nodes[0]])
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    return survivor


def test_a_lost_host_ends_the_other_with_a_named_error(two_hosts, tmp_path):
    """Node 1 dies; node 0's watchdog names the silent rank. (Node 0 lost, the store with it: watchdog/test_stall.py.)"""
    (ns0, _, addr0), (ns1, if1, _) = two_hosts
    env = clean_env()
    out = tmp_path / "lost"
    nodes = [start(_on(ns, *paratrain_cmd("run", *_node_args(r, addr0, 29613), "--rdzv-timeout", "60",
                                          "--stall-timeout", "6", FIT, str(out), "--steps", "100000")), env)
             for r, ns in enumerate((ns0, ns1))]
    survivor = _lose_node_1(nodes, out, 4, ns1, if1)
    assert survivor.returncode != 0, survivor.stderr
    last = survivor.stderr_lines[-1]
    assert last.startswith("paratrain run: error: the watchdog ended the job: stall: no progress for 6s"), last
    # The namespaces share one kernel and host name: the watchdog can read the dead process in /proc and says so;
    # from another machine it says "its process died or its host is unreachable".
    assert "rank 1 " in last and "its process died" in last, last


def test_with_an_elastic_node_range_the_survivor_of_a_lost_host_finishes_alone(two_hosts, tmp_path):
    """--nnodes 1:2: node 1 dies, node 0 re-rendezvouses alone and resumes from the last checkpoint."""
    (ns0, _, addr0), (ns1, if1, _) = two_hosts
    env = clean_env()
    out = tmp_path / "elastic"
    elastic = ["--nnodes", "1:2", "--master-addr", addr0, "--master-port", "29614", "--rdzv-timeout", "60",
               "--rdzv-last-call", "5", "--stall-timeout", "6"]  # torch's 30 s last call would only idle
    nodes = [start(_on(ns, *paratrain_cmd("run", *elastic, "--node-rank", str(r), FIT, str(out), "--steps", "30")), env)
             for r, ns in enumerate((ns0, ns1))]
    survivor = _lose_node_1(nodes, out, 8, ns1, if1)  # past the first checkpoint (every epoch: 6 steps)
    assert survivor.returncode == 0, survivor.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["steps"] == 30 and summary["resumed_from_step"] >= 6
    assert "was saved by 2 rank(s) and is loaded by 1" in survivor.stderr  # it says it went on with fewer
