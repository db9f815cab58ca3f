"""Two nodes behind a rate-limited link (two namespaces, a veth pair, tc): measured, chosen, reported."""

from __future__ import annotations

import subprocess

import pytest

from tests import netns
from tests.support import clean_env, paratrain_cmd


def test_two_nodes_on_a_slow_link_measure_it_choose_and_report(tmp_path):
    try:
        hosts_context = netns.two_hosts(rate="100mbit")
        hosts = hosts_context.__enter__()
    except netns.NetnsUnavailable as exc:
        pytest.skip(f"two rate-limited hosts cannot be built here: {exc}")
    try:
        words = ["train", "digits", "--nnodes", "2", "--nproc-per-node", "1", "--master-addr", hosts[0].address,
                 "--master-port", "29517", "--grad-compression", "auto", "--max-steps", "16", "--limit-train", "640",
                 "--limit-eval", "64", "--no-tensorboard", "--log-every", "8"]
        nodes = [subprocess.Popen(host.command(paratrain_cmd(*words, "--node-rank", str(rank),
                                                             "--out", str(tmp_path / "run"))),
                                  env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank, host in enumerate(hosts)]
        outputs = [node.communicate(timeout=300)[0] for node in nodes]
    finally:
        hosts_context.__exit__(None, None, None)
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(outputs)
    first = outputs[0]
    assert "link between the 2 nodes: latency" in first and "bus bandwidth" in first
    assert "grad_compression auto → " in first  # and why: the gradient size and the predicted all-reduce time
    assert "of fp32 gradients over" in first
    assert "gradient communication (" in first and "ms step" in first  # the comm vs compute report
    assert "done: 16 steps" in first
