"""A node range (``--nnodes 1:2``) on one machine, two launchers over 127.0.0.1: node 1 is killed,
node 0 goes on alone, node 1's same command is run again, and the job finishes on both nodes — on
the trajectory of a run that never lost a node: its per-step losses and final weights match an
uninterrupted 2-process run within 1e-6 relative (the global batch of 16 is split 1 × 8 × 2 while
node 0 is alone; here the match is exact, as one rank's mean of two micro-batches is the same fp32
sum as two ranks' mean). Two launchers on one loopback stand for two hosts: the rendezvous, the store and
gloo go over TCP as between hosts (tests/diagnostics/test_two_hosts.py covers two network namespaces).

Before: the rejoining node waited for a store address that torch publishes only in the first
round while node 0 waited for the newcomer (both failed at the rendezvous timeout, "role_info"
and "MASTER_ADDR" keys); with that fixed, the workers still waited for each other under two
store prefixes (each agent's own restart count) until the process group's timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from safetensors.torch import load_file

from tests.launch.processes import finish
from tests.loop.elastic_workers import step_losses
from tests.support import ROOT, clean_env, free_port, paratrain_cmd

FIT = str(ROOT / "tests" / "diagnostics" / "fit_script.py")
STEPS = 160  # at 2 nodes: 6 steps an epoch, a checkpoint at each epoch's end
GUARD_S = 240  # a hang guard, not a time limit: the test normally ends in well under half of it
RELATIVE = 1e-6


def _records(out) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _wait_for(condition, what: str, nodes) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {GUARD_S}s for {what}"
        assert nodes[0].poll() is None, f"node 0 ended while waiting for {what}: {nodes[0].communicate()}"
        time.sleep(0.1)


def test_a_killed_node_rejoins_and_the_job_finishes_on_both_nodes(tmp_path):
    out = tmp_path / "run"
    env = clean_env()
    port = str(free_port())

    def node(rank: int) -> subprocess.Popen:
        argv = paratrain_cmd("run", "--nnodes", "1:2", "--nproc-per-node", "1", "--node-rank", str(rank),
                             "--master-addr", "127.0.0.1", "--master-port", port, "--rdzv-timeout", "60",
                             "--rdzv-last-call", "2", "--max-restarts", "3", "--stall-timeout", "60",
                             FIT, str(out), "--steps", str(STEPS), "--step-sleep", "0.05", "--log-every", "1")
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    nodes = [node(0), node(1)]
    try:
        _wait_for(lambda: any(r["event"] == "checkpoint" for r in _records(out)), "the first checkpoint", nodes)
        os.killpg(nodes[1].pid, signal.SIGKILL)  # the node is gone: launcher and worker at once
        nodes[1].communicate()
        # Node 0 goes on alone: a second attempt that trains.
        attempts = lambda: [i for i, r in enumerate(_records(out)) if r["event"] == "attempt"]  # noqa: E731
        _wait_for(lambda: len(attempts()) >= 2 and any(r["event"] == "train" for r in _records(out)[attempts()[1]:]),
                  "node 0 to train alone", nodes)
        nodes[1] = node(1)  # the same command again
        node0, node1 = finish(nodes)
    finally:
        for proc in nodes:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert node0.returncode == 0 and node1.returncode == 0, node0.stderr[-3000:] + node1.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == STEPS, summary
    said = node0.stdout + node0.stderr
    assert "is loaded by 1" in said, said[-3000:]  # went on alone from the 2-rank checkpoint
    assert "saved by 1 rank(s) and is loaded by 2" in said, said[-3000:]  # and back on two nodes
    assert "the same trajectory" in said, said[-3000:]

    reference = tmp_path / "reference"  # the same job on 2 processes that never lose one
    whole = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", FIT, str(reference), "--steps", str(STEPS),
                                         "--log-every", "1"), cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=GUARD_S)
    assert whole.returncode == 0, whole.stderr[-3000:]
    want, got = step_losses(reference), step_losses(out)
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    loss_error = max(abs(got[s] - want[s]) / abs(want[s]) for s in want)
    final = f"checkpoints/step-{STEPS:06d}/model.safetensors"
    trained, uninterrupted = load_file(str(out / final)), load_file(str(reference / final))
    weight_error = max(float((trained[k] - v).abs().max() / v.abs().max()) for k, v in uninterrupted.items())
    print(f"--nnodes 1:2, node 1 lost and back: per-step loss {loss_error:.2e}, final weights {weight_error:.2e} (relative)")
    assert loss_error <= RELATIVE and weight_error <= RELATIVE
