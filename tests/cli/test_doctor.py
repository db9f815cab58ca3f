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
    # hsdp's mesh as the probe's ranks saw the job: one node, so one replica
    assert checks["hsdp mesh"] == {"check": "hsdp mesh", "status": "info", "fix": "", "detail": (
        "2 process(es) on 1 node(s) → replicate 1 × shard 2 (ranks 0-1 each hold one replica's shards), one "
        "replica: on one node hsdp is fsdp; it pays off across nodes")}


def test_doctor_plans_hsdp_meshes_and_refuses_one_that_cannot_be_built_in_one_line(capsys):
    from paratrain.cli.doctor_checks import hsdp_mesh
    from paratrain.cli.main import main

    assert main(["doctor", "--nproc-per-node", "4", "--replicate", "3"]) == 2
    err = capsys.readouterr().err
    assert err == ("paratrain doctor: error: hsdp replicate × shard must be the number of processes, 4; got "
                   "--replicate 3 (give one and the other follows)\n")
    assert main(["doctor", "--nnodes", "2", "--shard", "0", "--master-addr", "127.0.0.1"]) == 2
    assert capsys.readouterr().err == "paratrain doctor: error: hsdp --shard must be a positive integer, got 0\n"
    assert hsdp_mesh(8, 2, 4).detail == ("8 process(es) on 2 node(s) → replicate 2 × shard 4 (ranks 0-3, 4-7 each "
                                         "hold one replica's shards), a node each")
    assert hsdp_mesh(8, 2, 4, shard=2).detail.endswith("→ replicate 4 × shard 2 (ranks 0-1, 2-3, 4-5, … each hold "
                                                       "one replica's shards), as --replicate/--shard ask")
    uneven = hsdp_mesh(3, 2, None)
    assert uneven.status == "warning" and "the nodes run different numbers of processes" in uneven.detail
    assert uneven.fix == "run as many on each node, or give --replicate and --shard"


def test_doctor_names_a_problem_and_exits_non_zero():
    [run] = run_all([paratrain_cmd("doctor")], env=clean_env(GLOO_SOCKET_IFNAME="eth-nowhere", RANK="3"))
    assert run.returncode == 1
    assert "[problem] GLOO_SOCKET_IFNAME: names interface(s) eth-nowhere that do not exist here" in run.stdout
    assert "fix: unset GLOO_SOCKET_IFNAME or name one of those" in run.stdout
    assert "[problem] launcher variables: RANK set in this shell" in run.stdout
    assert run.stdout.strip().endswith("2 problem(s)")


def test_doctor_warns_of_a_python_whose_forked_loader_workers_can_hang_at_birth():
    from paratrain.cli.doctor_checks import fork_safety

    assert [fork_safety(v).status for v in [(3, 11, 7), (3, 10, 12), (3, 11, 9)]] == ["warning"] * 3
    assert [fork_safety(v).status for v in [(3, 11, 10), (3, 10, 15), (3, 12, 0), (3, 13, 1)]] == ["ok"] * 4
    finding = fork_safety((3, 11, 7))
    assert "gh-112275" in finding.detail and "3.11.10" in finding.fix
