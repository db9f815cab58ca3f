"""ft-ddp on 3 real replica groups of one process each, through ``paratrain run --fault-tolerance
replicas``, in one job: group 2 dies by SIGKILL inside a gradient all-reduce, then again at a random
moment once it is back (the launcher starts it again each time and it heals from a live group); then the
Lighthouse is killed, and every group restarts from its disk checkpoint. Until then the survivors'
processes never restart (their pids); every epoch trains each sample exactly once (the committed slices'
sample ids; a step replayed from disk trains the same slice); the final weights of every group equal one
uninterrupted process's within 1e-6 (measured: about 6e-8, the slices split over 2 or 3 groups sum in
another order). The ten-kill version: benchmarks/ft_kill_soak.py. Then the same on 2 groups of 2 processes each,
where one process of a group dies and its whole group restarts and heals; and on two nodes (network namespaces),
one launcher each against node 0's Lighthouse, where a group killed on node 1 heals across the nodes while node 0's
trains on, and a lost Lighthouse restarts both nodes' groups from disk; on two IPv6-only nodes with a group of 2
processes each, one process killed; and with ft-fsdp (the model sharded inside each group of 2). A Lighthouse at
[::1] and the Lighthouse address forms refused are checked in process."""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest
import torch

import paratrain as pt
from paratrain.errors import ConfigError
from tests.strategy import ft_workers
from tests.launch.probe import listening_sockets
from tests.support import free_port

pytest.importorskip("torchft")

BOUND = 1e-6


def test_survivors_never_stop_every_sample_trains_once_and_a_lost_lighthouse_resumes_from_disk(tmp_path):
    job = ft_workers.start_job(tmp_path, 3, FT_KILL_IN_ALLREDUCE="2:4", FT_STEP_SLEEP="0.6")
    lighthouse_lost = []

    def kill_the_lighthouse():
        lighthouse_lost.append(time.time())
        os.kill(ft_workers.lighthouse_pid(job.pid), signal.SIGKILL)

    kills, log = ft_workers.run_with_kills(job, tmp_path, victim=2, kills=1, rng=random.Random(3), last_step=70,
                                           wait_for_marker=True, then=kill_the_lighthouse)
    assert (tmp_path / "killed-in-allreduce").exists(), "group 2 never died inside the all-reduce"
    assert len(kills) == 1 and lighthouse_lost, (kills, log[-3000:])
    before = {g: sorted({r["pid"] for r in ft_workers.records(tmp_path, g) if r["time"] < lighthouse_lost[0]})
              for g in range(3)}
    assert len(before[0]) == 1 and len(before[1]) == 1, before  # the survivors never restarted
    assert len(before[2]) == 3, before  # the victim came back after each kill ...
    result = ft_workers.verify(tmp_path, 3)
    assert all(first > 1 for first in result["first_steps"][2][1:3]), result["first_steps"]  # ... and healed
    assert all(len(pids) == len(before[g]) + 1 for g, pids in result["pids"].items()), result["pids"]
    assert "group(s) 2 left the quorum" in log  # the survivors name the group they go on without
    lines = [line for line in log.splitlines() if "Lighthouse exited" in line]
    assert len(lines) == 1 and "resume from their last disk checkpoint" in lines[0], lines
    assert result["exactly_once"], result
    assert result["disagreements"] == 0  # a step replayed from disk trained the same slice
    assert result["steps"] == list(range(1, ft_workers.EPOCHS * ft_workers.SAMPLES // ft_workers.GLOBAL + 1))
    assert sorted(result["max_abs_diff"]) == [0, 1, 2]
    assert max(result["max_abs_diff"].values()) <= BOUND, result["max_abs_diff"]


def test_groups_of_two_processes_one_killed_restarts_whole_and_heals_while_the_other_trains_on(tmp_path):
    """2 groups of 2 processes. Group 1's rank 1 dies at its all-reduce across groups of step 5, before sending: group
    0's rank 1 waits for it inside that all-reduce, which fails, and group 0's vote drops step 5 on both its ranks
    (whatever its rank 0's all-reduce did) and trains it again alone. Later group 1's rank 0 (the one with the
    group's Manager server) dies at a random moment once the group is back. Each time the group's agent ends the
    group and the launcher starts both processes again, which heal from group 0's; group 0 keeps its two pids and
    commits alone meanwhile (each step split over its 2 processes)."""
    job = ft_workers.start_job(tmp_path, 2, nproc=2, FT_KILL_IN_ALLREDUCE="1:4:1", FT_STEP_SLEEP="0.6")
    kills, log = ft_workers.run_with_kills(job, tmp_path, victim=1, rank=0, kills=1, rng=random.Random(5),
                                           last_step=70, wait_for_marker=True)
    assert (tmp_path / "killed-in-allreduce").exists(), "group 1's rank 1 never died inside the all-reduce"
    assert len(kills) == 1, (kills, log[-3000:])
    result = ft_workers.verify(tmp_path, 2, nproc=2)
    pids = result["rank_pids"]
    assert len(pids["0.0"]) == 1 and len(pids["0.1"]) == 1, pids  # the survivors never restarted
    assert len(pids["1.0"]) == 3 and len(pids["1.1"]) == 3, pids  # the whole victim group, after each kill ...
    assert all(first > 1 for first in result["first_steps"][1][1:]), result["first_steps"]  # ... healed
    alone = [r["step"] for r in ft_workers.records(tmp_path, 0) if r["parts"] == 2]
    assert 5 in alone and len(alone) >= 2, alone  # step 5 dropped and trained again alone; the same after the 2nd kill
    assert "group(s) 1 left the quorum" in log
    assert result["exactly_once"], result
    assert result["disagreements"] == 0 and result["parts_wrong"] == 0, result
    assert result["parts_checked"] >= len(result["steps"]) - 2, result  # every step but those a kill cut short
    assert result["steps"] == list(range(1, ft_workers.EPOCHS * ft_workers.SAMPLES // ft_workers.GLOBAL + 1))
    assert set(result["max_abs_diff"]) == {0, 1, "0.1", "1.1"}, result["max_abs_diff"]  # every process finished
    assert max(result["max_abs_diff"].values()) <= BOUND, result["max_abs_diff"]


def test_ft_fsdp_groups_of_two_shard_the_model_one_process_killed_heals_its_shards_from_the_live_group(tmp_path):
    """strategy="ft-fsdp": 2 groups of 2 processes, each group sharding the model with FSDP2 over its 2 processes,
    each shard all-reduced over its ring. Group 1's rank 1 is killed at a random moment: group 0 keeps its pids and
    commits alone; group 1 comes back whole and each rank heals its shards from its peer of group 0 (no checkpoint
    is written). Every epoch trains each sample once and all 4 processes end with the same gathered weights, those
    of one uninterrupted process."""
    epochs = 2
    job = ft_workers.start_job(tmp_path, 2, nproc=2, FT_STRATEGY="ft-fsdp", FT_STEP_SLEEP="0.5",
                               FT_EPOCHS=str(epochs), FT_SAVE_EVERY="1000")
    ft_workers.wait_for_every_group(tmp_path, parts=4)  # both groups train together before the kill
    kills, log = ft_workers.run_with_kills(job, tmp_path, victim=1, rank=1, kills=1, rng=random.Random(17),
                                           last_step=20)
    assert len(kills) == 1, (kills, log[-3000:])
    written = [p for p in tmp_path.glob("group*/**/*") if p.is_file()]
    assert not written, written
    result = ft_workers.verify(tmp_path, 2, epochs=epochs, nproc=2)
    pids = result["rank_pids"]
    assert len(pids["0.0"]) == 1 and len(pids["0.1"]) == 1, pids  # the survivors never restarted
    assert len(pids["1.0"]) == 2 and len(pids["1.1"]) == 2, pids  # the victim group came back whole ...
    assert result["first_steps"][1][1] > 1, result["first_steps"]  # ... and healed
    after_kill = [r for r in ft_workers.records(tmp_path, 0) if r["time"] > kills[0]["time"]]
    assert any(r["parts"] == 2 for r in after_kill), after_kill[:5]  # group 0 committed alone meanwhile
    assert result["exactly_once"] and result["disagreements"] == 0 and result["parts_wrong"] == 0, result
    assert result["steps"] == list(range(1, epochs * ft_workers.SAMPLES // ft_workers.GLOBAL + 1))
    assert set(result["max_abs_diff"]) == {0, 1, "0.1", "1.1"}, result["max_abs_diff"]
    assert max(result["max_abs_diff"].values()) <= BOUND, result["max_abs_diff"]
    finals = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("final-*.json"))]
    assert len(finals) == 4 and all(final["state"] == finals[0]["state"] for final in finals), "the weights differ"
    assert all(final["held"] < final["whole"] for final in finals), [(f["held"], f["whole"]) for f in finals]  # shards
    healed = next(r for r in ft_workers.records(tmp_path, 1, 1) if r["time"] > kills[0]["time"])
    print(f"ft-fsdp: each process held {[f['held'] for f in finals]} of {finals[0]['whole']} elements; rank pids {pids}; kill after step {kills[0]['after_step']} -> group 0's next committed step "
          f"{after_kill[0]['step']} {after_kill[0]['time'] - kills[0]['time']:.2f} s later; group 1's healed step "
          f"{healed['step']} {healed['time'] - kills[0]['time']:.1f} s after the kill; max |w - reference| "
          f"{result['max_abs_diff']}")


def _late_for_the_quorum() -> str:
    """Group rank 1 is busy elsewhere past the quorum's and the probe's timeouts: rank 0's step names it."""
    rt = pt.Runtime(strategy="ft-ddp", quorum_timeout=1, collective_timeout=1)
    train = rt.loader(ft_workers.Rows(), batch_size=8)
    said = ""
    if rt.rank == 0:
        try:
            next(iter(train))
        except pt.DistributedError as exc:
            said = f"{type(exc).__name__}: {exc}"
    else:
        time.sleep(4)  # past the quorum's 1 s and the probe's 1 s on rank 0
    rt.strategy.close()
    return said


def test_a_rank_of_the_group_late_for_the_quorum_is_named(tmp_path):
    from torchft._torchft import LighthouseServer

    lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=1)
    try:
        said = pt.spawn(_late_for_the_quorum, nprocs=2, timeout=120,
                        env={"TORCHFT_LIGHTHOUSE": "http://127.0.0.1:" + lighthouse.address().rsplit(":", 1)[1]})
    finally:
        lighthouse.shutdown()
    assert said.startswith("CollectiveTimeoutError: replica group 0 at step 0: the quorum did not complete"), said
    assert "rank(s) 1 did not arrive within 1s" in said, said


def test_refusals_in_one_line(monkeypatch):
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE", raising=False)
    with pytest.raises(ConfigError, match="needs a Lighthouse: set TORCHFT_LIGHTHOUSE"):
        pt.Runtime(strategy="ft-ddp")
    from paratrain.strategy import STRATEGIES

    cls = STRATEGIES["ft-ddp"]
    cls.check(2, cls.parse_options({}))  # a replica group of several processes
    with pytest.raises(ConfigError, match="heal_retries must be positive"):
        cls.parse_options({"heal_retries": 0})
    data = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.zeros(8, dtype=torch.long))
    with pytest.raises(ConfigError, match=r"strategy='ft-ddp' does not run in pt.fit or paratrain train: .* own loop"):
        pt.fit(torch.nn.Linear(3, 2), data, data, strategy="ft-ddp", progress=False, tensorboard=False)
    monkeypatch.setenv("TORCHFT_LIGHTHOUSE", f"http://127.0.0.1:{free_port()}")
    listening_before = set(listening_sockets(os.getpid()))
    with pytest.raises(pt.DistributedError, match=r"replica group 0 cannot reach the Lighthouse at http://127"):
        pt.Runtime(strategy="ft-ddp", collective_timeout=1)
    assert set(listening_sockets(os.getpid())) <= listening_before  # the refused start left nothing listening


def test_a_lighthouse_at_an_ipv6_literal_is_reached_and_bad_forms_are_refused_in_one_line(monkeypatch):
    """``TORCHFT_LIGHTHOUSE`` as ``[::1]:PORT`` (``http://`` added) reaches a Lighthouse listening on ``[::1]`` and
    a step commits, with the group's store and Manager server on ``::1`` too (``PARATRAIN_FT_ADDRESS``): the quorum
    hands out ``::1:PORT`` store addresses and a bracketed Manager address. An IPv6 literal without brackets, or
    without a port, is refused in one line that writes the form to use, before anything starts."""
    from torchft._torchft import LighthouseServer

    from paratrain.replica_environ import ADDRESS_ENV

    for bad, fix in (("http://::1:29500", "write http://[::1]:29500"), ("fd00::1", "write http://[fd00::1]:PORT"),
                     ("http://[::1]", "write http://10.0.0.1:29500 or, for IPv6, http://[fd00::1]:29500")):
        monkeypatch.setenv("TORCHFT_LIGHTHOUSE", bad)
        with pytest.raises(ConfigError) as refused:
            pt.Runtime(strategy="ft-ddp", collective_timeout=1)
        assert len(str(refused.value).splitlines()) == 1 and str(refused.value).endswith(fix), str(refused.value)
    lighthouse = LighthouseServer(bind="[::1]:0", min_replicas=1)
    try:
        monkeypatch.setenv("TORCHFT_LIGHTHOUSE", "[::1]:" + lighthouse.address().rsplit(":", 1)[1])
        monkeypatch.setenv(ADDRESS_ENV, "::1")
        rt = pt.Runtime(strategy="ft-ddp", seed=0, collective_timeout=5)
        try:
            assert rt.strategy.lighthouse == "http://" + os.environ["TORCHFT_LIGHTHOUSE"]
            net = ft_workers.model()
            net, optimizer = rt.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
            x, y, _ = next(iter(rt.loader(ft_workers.Rows(), batch_size=8)))
            rt.backward(torch.nn.functional.mse_loss(net(x), y))
            assert rt.step(optimizer) and rt.strategy.committed_steps == 1
            from torchft.manager import MANAGER_ADDR_KEY

            advertised = rt.strategy.manager._store.get(MANAGER_ADDR_KEY).decode()
            assert advertised.startswith("http://[::1]:"), advertised  # torchft's own form would be http://::1:PORT
        finally:
            rt.close()
    finally:
        lighthouse.shutdown()


def test_two_nodes_one_lighthouse_a_killed_group_heals_across_nodes_a_lost_lighthouse_restarts_both(tmp_path, two_hosts):
    """Two nodes (network namespaces joined by a veth pair), one launcher each, one group of one process per
    node: node 0's launcher starts the Lighthouse on its address, node 1's waits for it; every address a group
    dials on the other node (the Lighthouse, the store of the quorum's rings, the Manager and checkpoint servers
    a healing group fetches from, gloo's sockets) is the veth pair's. Node 1's worker (group 1) is killed at a
    random moment: node 0's group keeps its pid and commits alone, node 1's launcher starts its group again and
    it heals across the pair. Then node 0's Lighthouse is killed: each launcher says so in one line, and both
    groups start again from their disk checkpoints. Every epoch trains each sample once (a step replayed from
    disk, the same slice) and both final weights match one uninterrupted process's."""
    (ns0, _, addr0), (ns1, _, _) = two_hosts
    epochs = 2
    jobs = [ft_workers.start_job(tmp_path, 1, node=(["ip", "netns", "exec", ns], [
        "--nnodes", "2", "--node-rank", str(rank), "--master-addr", addr0, "--master-port", "29500",
        "--rdzv-timeout", "60"]), FT_STEP_SLEEP="0.4", FT_EPOCHS=str(epochs)) for rank, ns in enumerate((ns0, ns1))]
    lighthouse_lost = []

    def kill_the_lighthouse():
        lighthouse_lost.append(time.time())
        os.kill(ft_workers.lighthouse_pid(jobs[0].pid), signal.SIGKILL)
        # The steps stay slow until both groups trained again: neither finishes the run alone before the other is back.
        guard = time.monotonic() + 120
        while time.monotonic() < guard and not all(
                any(r["time"] > lighthouse_lost[0] for r in ft_workers.records(tmp_path, g)) for g in range(2)):
            time.sleep(0.2)

    try:
        kills = ft_workers.kill_at_random(jobs[1], tmp_path, victim=1, kills=1, rng=random.Random(11), last_step=25,
                                          then=kill_the_lighthouse)
        codes, ended = [], []
        for job in jobs:
            codes.append(job.wait(timeout=300))  # a guard against a hang, not a time limit
            ended.append(time.time())
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
    logs = [(tmp_path / f"job-{rank}.log").read_text() for rank in range(2)]
    assert codes == [0, 0], [log[-3000:] for log in logs]
    assert f"Lighthouse at http://{addr0}:29500; starting 1 replica group (0 of 2, node 0)" in logs[0], logs[0][-3000:]
    assert f"Lighthouse at http://{addr0}:29500; starting 1 replica group (1 of 2, node 1)" in logs[1], logs[1][-3000:]
    assert len(kills) == 1 and lighthouse_lost, (kills, logs[1][-3000:])
    assert "replica group 1 exited with code" in logs[1] and "it heals from a live group" in logs[1], logs[1][-3000:]
    before = {g: [r for r in ft_workers.records(tmp_path, g) if r["time"] < lighthouse_lost[0]] for g in range(2)}
    assert len({r["pid"] for r in before[0]}) == 1, before[0]  # node 0's group never restarted ...
    after_kill = [r for r in before[0] if r["time"] > kills[0]["time"]]
    assert any(r["parts"] == 1 for r in after_kill), after_kill[:5]  # ... and committed alone meanwhile
    victim_pids = list(dict.fromkeys(r["pid"] for r in before[1]))
    assert len(victim_pids) == 2, victim_pids  # node 1's group came back ...
    assert next(r["step"] for r in before[1] if r["pid"] == victim_pids[1]) > 1, before[1]  # ... and healed
    assert "group(s) 1 left the quorum" in logs[0]
    lost = [[line for line in log.splitlines() if "the Lighthouse" in line and "resume from their last disk" in line]
            for log in logs]
    assert [len(lines) for lines in lost] == [1, 1], lost
    assert "Lighthouse exited (code -9): stopping every replica group of this node, starting it again" in lost[0][0]
    assert f"Lighthouse at {addr0}:29500 stopped answering" in lost[1][0], lost
    result = ft_workers.verify(tmp_path, 2, epochs=epochs)
    assert [len(result["pids"][g]) for g in range(2)] == [2, 3], result["pids"]  # both started again from disk
    assert result["exactly_once"] and result["disagreements"] == 0, result
    assert result["steps"] == list(range(1, epochs * ft_workers.SAMPLES // ft_workers.GLOBAL + 1))
    assert sorted(result["max_abs_diff"]) == [0, 1]
    assert max(result["max_abs_diff"].values()) <= BOUND, result["max_abs_diff"]
    after_loss = [r for r in ft_workers.records(tmp_path, 0) if r["time"] > lighthouse_lost[0]]
    print(f"pids: node 0 {result['pids'][0]}, node 1 {result['pids'][1]} (first steps {result['first_steps']}); "
          f"kill after step {kills[0]['after_step']} -> node 0's next committed step {after_kill[0]['step']} "
          f"{after_kill[0]['time'] - kills[0]['time']:.2f} s later; node 1's healed step "
          f"{next(r['time'] for r in before[1] if r['pid'] == victim_pids[1]) - kills[0]['time']:.1f} s after the kill; "
          f"Lighthouse lost -> next committed step "
          f"{after_loss[0]['time'] - lighthouse_lost[0]:.2f} s; max |w - reference| {result['max_abs_diff']}; "
          f"launchers ended {ended[0] - lighthouse_lost[0]:.1f} s and {ended[1] - lighthouse_lost[0]:.1f} s after it")


def test_two_ipv6_nodes_groups_of_two_processes_one_killed_heals_across_nodes_while_the_other_node_trains_on(
        tmp_path, two_ipv6_hosts):
    """Two nodes (network namespaces joined by a veth pair that carries IPv6 addresses only), one launcher each
    against node 0's Lighthouse at an IPv6 literal (``--master-addr [fd00:…::1]`` on node 0, the same address
    without brackets on node 1), one replica group of 2 processes per node: the Lighthouse, the groups' stores,
    Manager and checkpoint servers and gloo's sockets all speak IPv6 across the pair. Group 1's rank 1 (node 1) is killed with SIGKILL at a random moment:
    its agent ends the group, node 1's launcher starts both processes again, and each heals over the pair from its
    peer rank of node 0's group (no checkpoint read: none is written before the kill); node 0's two processes keep
    their pids and commit alone meanwhile, each step split over their 2 parts. Every epoch trains each sample once,
    every step's parts make its slice, and all 4 processes end with the same weights, those of one uninterrupted
    process."""
    (ns0, _, addr0), (ns1, _, _) = two_ipv6_hosts
    epochs = 2
    jobs = [ft_workers.start_job(tmp_path, 1, nproc=2, node=(["ip", "netns", "exec", ns], [
        "--nnodes", "2", "--node-rank", str(rank), "--master-addr", f"[{addr0}]" if rank == 0 else addr0,
        "--master-port", "29500",
        "--rdzv-timeout", "60"]), FT_STEP_SLEEP="0.4", FT_EPOCHS=str(epochs), FT_SAVE_EVERY="1000")
        for rank, ns in enumerate((ns0, ns1))]
    try:
        ft_workers.wait_for_every_group(tmp_path, parts=4)  # both nodes' groups train together before the kill
        kills = ft_workers.kill_at_random(jobs[1], tmp_path, victim=1, rank=1, kills=1, rng=random.Random(13),
                                          last_step=25)
        codes = [job.wait(timeout=300) for job in jobs]  # a guard against a hang, not a time limit
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
    logs = [(tmp_path / f"job-{rank}.log").read_text() for rank in range(2)]
    assert codes == [0, 0], [log[-3000:] for log in logs]
    assert len(kills) == 1, (kills, logs[1][-3000:])
    for rank in range(2):
        started = f"Lighthouse at http://[{addr0}]:29500; starting 1 replica group ({rank} of 2, node {rank})"
        assert started in logs[rank], logs[rank][-3000:]
    assert "replica group 1 exited with code" in logs[1] and "it heals from a live group" in logs[1], logs[1][-3000:]
    written = [p for p in tmp_path.glob("group*/**/*") if p.is_file()]
    assert not written, written  # no checkpoint on disk: healing took the state from the live group
    result = ft_workers.verify(tmp_path, 2, epochs=epochs, nproc=2)
    pids = result["rank_pids"]
    assert len(pids["0.0"]) == 1 and len(pids["0.1"]) == 1, pids  # node 0's group never restarted
    assert len(pids["1.0"]) == 2 and len(pids["1.1"]) == 2, pids  # node 1's group came back whole ...
    assert result["first_steps"][1][1] > 1, result["first_steps"]  # ... and healed from node 0's
    after_kill = [r for r in ft_workers.records(tmp_path, 0) if r["time"] > kills[0]["time"]]
    assert any(r["parts"] == 2 for r in after_kill), after_kill[:5]  # node 0's group committed alone meanwhile
    assert "group(s) 1 left the quorum" in logs[0]
    assert result["exactly_once"] and result["disagreements"] == 0 and result["parts_wrong"] == 0, result
    assert result["parts_checked"] >= len(result["steps"]) - 2, result  # every step but those a kill cut short
    assert result["steps"] == list(range(1, epochs * ft_workers.SAMPLES // ft_workers.GLOBAL + 1))
    assert set(result["max_abs_diff"]) == {0, 1, "0.1", "1.1"}, result["max_abs_diff"]  # every process finished
    assert max(result["max_abs_diff"].values()) <= BOUND, result["max_abs_diff"]
    finals = [json.loads(path.read_text())["state"] for path in sorted(tmp_path.glob("final-*.json"))]
    assert len(finals) == 4 and all(final == finals[0] for final in finals), "the final weights differ"
    healed = next(r for r in ft_workers.records(tmp_path, 1, 1) if r["time"] > kills[0]["time"])
    print(f"rank pids {pids}; first steps {result['first_steps']}; kill after step {kills[0]['after_step']} -> "
          f"node 0's next committed step {after_kill[0]['step']} {after_kill[0]['time'] - kills[0]['time']:.2f} s "
          f"later; node 1's healed step {healed['step']} {healed['time'] - kills[0]['time']:.1f} s after the kill; "
          f"max |w - reference| {result['max_abs_diff']}")


@pytest.mark.parametrize("value", ["one", "1.5"])
def test_a_replica_group_id_that_is_not_an_integer_is_one_line_naming_the_variable(monkeypatch, value):
    from paratrain.strategy.ft_ddp import replica_group

    monkeypatch.setenv("REPLICA_GROUP_ID", value)
    with pytest.raises(ConfigError, match=r"REPLICA_GROUP_ID='.*' is not an integer"):
        replica_group()
    monkeypatch.setenv("REPLICA_GROUP_ID", "")
    assert replica_group() == 0  # set but empty: outside a fault-tolerant launch, as unset
