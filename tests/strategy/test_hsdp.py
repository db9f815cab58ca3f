"""hsdp on 4 real gloo processes as 2 nodes × 2 (two `paratrain run` launchers over 127.0.0.1, and
again in two network namespaces joined by a veth pair): the numbers of one process with the whole
batch, a mesh whose shard groups are the nodes, and a checkpoint (written in the background) that fsdp on
the same 4, ddp on 2 and one plain process resume on the same trajectory; `paratrain train` with strategy auto on two
nodes, which shards with hsdp and says why in its first line.

Run as a module under `paratrain run`, this file is the job every node runs (:func:`node_job`).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import paratrain as pt
from paratrain.env import detect
from tests.launch.processes import finish, start
from tests.strategy.recipes import CLIP, SEED, Net, dataset, flat_state, sgd
from tests.support import clean_env, free_port, paratrain_cmd

STEPS = 20
FIRST_SAVE_AT = 5  # the hsdp run checkpoints after this step (in the foreground: a run's first save) …
SAVE_AT = 10  # … and after this one (in the background), and goes on
GLOBAL = 16  # rows per step, split evenly over the ranks
RTOL = 1e-6


def train_steps(rt: pt.Runtime, model, optimizer, first: int, last: int) -> dict[str, list[float]]:
    """Steps ``first`` … ``last - 1`` of one fixed sequence of global batches, each rank taking its rows."""
    x, y = dataset(GLOBAL * STEPS)
    rows = GLOBAL // rt.world_size
    losses, norms = [], []
    for step in range(first, last):
        start_row = step * GLOBAL + rt.rank * rows
        loss = F.mse_loss(model(x[start_row:start_row + rows]), y[start_row:start_row + rows])
        rt.backward(loss)
        norms.append(float(rt.step(optimizer, clip_norm=CLIP).grad_norm))
        losses.append(float(pt.all_reduce(loss.detach(), op="mean")))
    return {"losses": losses, "norms": norms}


def node_job(out: str) -> None:
    """What every process of the 2 × 2 job runs: train, checkpoint at SAVE_AT, train on; then, in the
    same 4 processes, resume that checkpoint on fsdp (1-D over all 4). Rank 0 writes the record."""
    rt = pt.Runtime(strategy="hsdp", seed=SEED)
    model = Net()
    model, optimizer = rt.setup(model, sgd(model.parameters()))
    mesh = next(model.parameters()).device_mesh
    ckpt = pt.Checkpointer(rt, Path(out) / "ckpt", model=model, optimizer=optimizer, background=True)
    first = train_steps(rt, model, optimizer, 0, FIRST_SAVE_AT)
    ckpt.save(step=FIRST_SAVE_AT)  # a run's first save: in the foreground
    more = train_steps(rt, model, optimizer, FIRST_SAVE_AT, SAVE_AT)
    ckpt.save(step=SAVE_AT)  # in the background: written by every rank's thread while training goes on
    in_background = ckpt._writing_name is not None
    second = train_steps(rt, model, optimizer, SAVE_AT, STEPS)
    ckpt.finish_writing()
    first = {key: first[key] + more[key] for key in first}
    state = flat_state(rt.full_state_dict(model))
    nodes = pt.all_gather_object(rt.strategy.process.node_rank)
    auto_sees = detect().num_nodes  # what strategy="auto" is given: 2 nodes, so a sharded model gets hsdp
    record = {"losses": first["losses"] + second["losses"], "norms": first["norms"] + second["norms"],
              "state": state, "mesh": mesh.mesh.tolist(), "mesh_dims": list(mesh.mesh_dim_names), "nodes": nodes,
              "auto_sees_nodes": auto_sees, "local_numel": sum(p.to_local().numel() for p in model.parameters()),
              "full_numel": sum(p.numel() for p in model.parameters()), "in_background": in_background}
    rt.close()
    record["fsdp_resumed"] = resume_job("fsdp", str(Path(out) / "ckpt"))
    if pt.rank() == 0:
        (Path(out) / "record.json").write_text(json.dumps(record))


def resume_job(strategy: str, directory: str) -> dict:
    """Resume the hsdp checkpoint on ``strategy`` at this world size (other initial weights) and finish the run."""
    rt = pt.Runtime(strategy=strategy, seed=SEED + 1)
    model = Net()
    model, optimizer = rt.setup(model, sgd(model.parameters()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "saved by 4 rank(s) and is loaded by N": the point of this test
        state = pt.Checkpointer(rt, directory, model=model, optimizer=optimizer).resume()
    result = train_steps(rt, model, optimizer, state.step, STEPS)
    result["state"] = flat_state(rt.full_state_dict(model))
    result["strategy"] = rt.strategy.name
    rt.close()
    return result


def launch_two_nodes(out: Path, master: str, port: str, wrap=lambda node, argv: argv) -> None:
    """The 2 × 2 job of :func:`node_job` from two launchers (``wrap`` puts node ``rank``'s into its host)."""
    nodes = [
        start(wrap(rank, paratrain_cmd("run", "--nnodes", "2", "--node-rank", str(rank), "--master-addr", master,
                                       "--master-port", port, "--nproc-per-node", "2", "--rdzv-timeout", "60",
                                       "-m", "tests.strategy.test_hsdp", str(out))), clean_env(PARATRAIN_TIMEOUT="90"))
        for rank in (0, 1)
    ]
    for node in finish(nodes):
        assert node.returncode == 0, node.stderr


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    out = tmp_path_factory.mktemp("hsdp")
    launch_two_nodes(out, "127.0.0.1", str(free_port()))
    return out, json.loads((out / "record.json").read_text())


@pytest.fixture(scope="module")
def whole_batch():
    rt = pt.Runtime(strategy="single", seed=SEED)
    model = Net()
    model, optimizer = rt.setup(model, sgd(model.parameters()))
    result = train_steps(rt, model, optimizer, 0, STEPS)
    result["state"] = flat_state(rt.full_state_dict(model))
    rt.close()
    return result


def assert_same(got: dict, want: dict, steps: int) -> None:
    assert len(got["losses"]) == steps
    torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(want["losses"][-steps:]), rtol=RTOL, atol=0)
    assert got["state"].keys() == want["state"].keys()
    for name, values in want["state"].items():
        torch.testing.assert_close(torch.tensor(got["state"][name]), torch.tensor(values), rtol=RTOL, atol=RTOL)


def test_two_nodes_of_two_match_one_process_with_the_whole_batch(two_nodes, whole_batch):
    _, record = two_nodes
    assert_same(record, whole_batch, STEPS)
    torch.testing.assert_close(torch.tensor(record["norms"]), torch.tensor(whole_batch["norms"]), rtol=1e-5, atol=0)
    assert max(whole_batch["norms"]) > CLIP  # clipping really happened


def test_the_mesh_shards_inside_a_node_and_replicates_across_nodes(two_nodes):
    _, record = two_nodes
    assert record["mesh_dims"] == ["replicate", "shard"]
    assert record["mesh"] == [[0, 1], [2, 3]] and record["nodes"] == [0, 0, 1, 1]  # a row of the mesh is a node
    assert record["local_numel"] < 0.6 * record["full_numel"]  # each rank keeps half: shards over 2, not 4
    assert record["auto_sees_nodes"] == 2


def test_two_hosts_of_two_processes_match_one_process_with_the_whole_batch(two_hosts, whole_batch, tmp_path):
    """The same job as two hosts in network namespaces: each node's shard group on its own loopback,
    the replicas' all-reduce over the veth pair between them."""
    (ns0, _, addr0), (ns1, _, _) = two_hosts
    launch_two_nodes(tmp_path, addr0, "29531", lambda rank, argv: ["ip", "netns", "exec", (ns0, ns1)[rank], *argv])
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["mesh"] == [[0, 1], [2, 3]] and record["nodes"] == [0, 0, 1, 1]
    assert_same(record, whole_batch, STEPS)
    torch.testing.assert_close(torch.tensor(record["norms"]), torch.tensor(whole_batch["norms"]), rtol=1e-5, atol=0)


def test_a_checkpoint_of_hsdp_resumes_on_fsdp_over_the_four_processes(two_nodes):
    _, record = two_nodes
    assert record["in_background"]  # the checkpoint every resume below starts from was written in the background
    assert record["fsdp_resumed"]["strategy"] == "fsdp"
    assert_same(record["fsdp_resumed"], record, STEPS - SAVE_AT)


def test_a_checkpoint_of_hsdp_resumes_on_ddp_with_two_processes(two_nodes):
    out, record = two_nodes
    resumed = pt.spawn(resume_job, nprocs=2, args=("ddp", str(out / "ckpt")))
    assert resumed["strategy"] == "ddp"
    assert_same(resumed, record, STEPS - SAVE_AT)


def test_a_checkpoint_of_hsdp_resumes_in_one_plain_process(two_nodes):
    out, record = two_nodes
    assert_same(resume_job("single", str(out / "ckpt")), record, STEPS - SAVE_AT)


def test_a_mesh_that_is_not_the_world_size_is_refused_in_one_line():
    with pytest.raises(pt.ConfigError) as info:
        pt.Runtime(strategy="hsdp", replicate=3)
    message = str(info.value)
    assert "\n" not in message and "shards the model over processes" in message  # one process: nothing to shard
    from paratrain.runtime.resolve import resolve

    with pytest.raises(pt.ConfigError, match=r"hsdp replicate × shard must be the number of processes, 4; got "
                                             r"replicate=2, shard=3"):
        resolve("hsdp", world_size=4, strategy_options={"replicate": 2, "shard": 3})


def test_auto_on_two_nodes_trains_hsdp_and_the_first_line_says_why(tmp_path):
    """`paratrain train` with strategy auto and an option that asks to shard, from two launchers
    (--nnodes 2 over 127.0.0.1, 2 processes each): hsdp, the reason, and the mesh in the run's first line."""
    port = str(free_port())
    words = ["train", "digits", "--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
             "--master-port", port, "--rdzv-timeout", "60", "--min-params", "1000", "--max-steps", "2",
             "--limit-train", "128", "--limit-eval", "32", "--batch-size", "8", "--no-tensorboard",
             "--out", str(tmp_path / "run")]
    nodes = finish([start(paratrain_cmd(*words, "--node-rank", str(rank)), clean_env(PARATRAIN_TIMEOUT="90"))
                    for rank in (0, 1)])
    assert [node.returncode for node in nodes] == [0, 0], nodes[0].stderr + nodes[1].stderr
    first = next(line for line in nodes[0].stdout.splitlines() if "process(es) × batch" in line)
    assert "4 process(es)" in first
    assert ("strategy hsdp (auto: 2 nodes, and min_params asks to shard: sharded inside each node, replicated "
            "across them; mesh replicate 2 × shard 2)") in first, first


@pytest.mark.parametrize("world_size, num_nodes, chosen", [(4, 2, "hsdp"), (4, 1, "fsdp"), (1, 1, "single")])
def test_auto_shards_inside_the_nodes_when_the_model_asks_to_be_sharded(world_size, num_nodes, chosen):
    from paratrain.runtime.resolve import resolve

    asked = resolve("auto", world_size=world_size, num_nodes=num_nodes, strategy_options={"min_params": 1000})
    assert asked.strategy == chosen
    assert asked.auto_reason == {"hsdp": "2 nodes, and min_params asks to shard: sharded inside each node, "
                                         "replicated across them",
                                 "fsdp": "one node, and min_params asks to shard", "single": "one process"}[chosen]
    assert resolve(chosen, world_size=world_size, num_nodes=num_nodes, strategy_options={"min_params": 1000}
                   if chosen != "single" else None).auto_reason == ""  # named, not chosen
    assert resolve("auto", world_size=world_size, num_nodes=num_nodes).strategy == ("ddp" if world_size > 1 else "single")


if __name__ == "__main__":
    node_job(sys.argv[1])


def test_nodes_of_different_sizes_are_refused_on_every_node_not_only_where_the_sizes_multiply_out():
    """Nodes of 1, 2 and 3 processes: the node of 2 sees 3 nodes × 2 = 6 = the world size, yet no mesh fits;
    every rank must refuse alike (one building a mesh would wait for the others until the timeout)."""
    import torch

    from paratrain.env.api import ProcessInfo
    from paratrain.precision.fp32 import FP32Precision
    from paratrain.strategy.hsdp import HSDPStrategy

    for local_rank, per_node in ((0, 1), (0, 2), (1, 3)):
        process = ProcessInfo(rank=local_rank, local_rank=local_rank, world_size=6, local_world_size=per_node,
                              node_rank=0, num_nodes=3, master_addr=None, master_port=None, source="torchrun",
                              uneven_nodes=True)
        strategy = HSDPStrategy().connect(process, torch.device("cpu"), FP32Precision())
        with pytest.raises(pt.ConfigError, match="run as many on each node, or give replicate"):
            strategy.mesh_shape()
