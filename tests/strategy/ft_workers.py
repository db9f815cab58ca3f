"""The job every replica group runs in the ft-ddp tests and benchmarks (``paratrain run
--fault-tolerance replicas … tests/strategy/ft_workers.py OUT``), and the uninterrupted reference.

Each group trains ``EPOCHS`` epochs of a seeded order over ``SAMPLES`` rows in global batches of
``GLOBAL``, checkpoints to ``OUT/group<i>`` every ``SAVE_EVERY`` (``FT_SAVE_EVERY``) committed steps, and each of its
processes appends one line per committed step to ``OUT/steps-<i>.jsonl`` (group rank 0; rank ``r``
of a group of several: ``steps-<i>.<r>.jsonl``): its pid, the committed step, the epoch, the step's
whole slice, its own part, the part's loss weight, the number of parts, and when the step's quorum came and when
it committed (``began``, ``time``); a dropped step appends those two times to ``OUT/drops-<i>.jsonl``.
``FT_KILL_IN_ALLREDUCE=G:S`` makes group G's rank 0 kill itself with SIGKILL inside the gradient all-reduce across groups of committed
step S, once per run (a marker file in OUT); ``G:S:R``: its rank R, at the all-reduce, before its part is
sent, so that the peers of its ring wait for it inside the collective.
``FT_STRATEGY`` picks the strategy (``ft-ddp``; ``ft-fsdp``). ``FT_STEP_SLEEP`` seconds between steps stretch the run until the harness is done (``OUT/harness-done``):
the kills, and the relaunches after them, need time to land, however loaded the machine.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

SAMPLES, GLOBAL, EPOCHS, SAVE_EVERY, LR = 240, 8, 3, 10, 0.05
SEED = 7


class Rows(torch.utils.data.Dataset):
    """Row ``i``: features, target, and ``i`` itself (the tests count sample ids)."""

    def __init__(self, n: int = SAMPLES):
        generator = torch.Generator().manual_seed(SEED)
        self.x = torch.randn(n, 8, generator=generator)
        self.y = (self.x.sum(dim=1, keepdim=True) > 0).float()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i], i


def model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def reference(epochs: int = EPOCHS) -> dict[str, torch.Tensor]:
    """One process, no failure: every step the whole slice, its mean loss, the same order."""
    from paratrain.data.committed_slices import CommittedSlices

    net, rows = model(), Rows()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    slices = CommittedSlices(len(rows), GLOBAL, seed=SEED)
    while slices.epoch < epochs:
        while not slices.epoch_done:
            ids = slices.next_slice()
            loss = F.binary_cross_entropy_with_logits(net(rows.x[ids]), rows.y[ids])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            slices.commit()
        slices.next_epoch()
    return net.state_dict()


def _name(stem: str, group: int, rank: int, suffix: str = "") -> str:
    """``stem-<group><suffix>`` for group rank 0, ``stem-<group>.<rank><suffix>`` for the others."""
    return f"{stem}-{group}{'' if rank == 0 else f'.{rank}'}{suffix}"


def kill_in_allreduce(rt, out: Path) -> None:
    """Rank R (default 0) of group G of ``FT_KILL_IN_ALLREDUCE=G:S[:R]`` dies inside the all-reduce across
    groups of step S (once)."""
    spec = os.environ.get("FT_KILL_IN_ALLREDUCE", "")
    marker = out / "killed-in-allreduce"
    if not spec or marker.exists():
        return
    numbers = list(map(int, spec.split(":")))
    group, step, rank = (numbers + [0])[:3]
    if group != rt.strategy.group or rank != rt.strategy.group_rank:
        return
    manager = rt.strategy.manager
    issue = manager.allreduce
    unsent = len(numbers) == 3  # G:S:R dies before its part is sent: its ring's peers cannot finish the step

    def allreduce_then_die(tensor, *args, **kwargs):
        if unsent and manager.current_step() == step:
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        work = issue(tensor, *args, **kwargs)  # the peers are in the collective with us now
        if manager.current_step() == step:
            marker.write_text(str(os.getpid()))
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        return work

    manager.allreduce = allreduce_then_die


def main(out: Path) -> None:
    import paratrain as pt

    rt = pt.Runtime(strategy=os.environ.get("FT_STRATEGY", "ft-ddp"), seed=SEED)
    group, rank = rt.strategy.group, rt.strategy.group_rank
    (out / _name("pid", group, rank)).write_text(str(os.getpid()))  # for a harness that kills at random
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    net, optimizer = rt.setup(net, optimizer)
    train = rt.loader(Rows(), batch_size=GLOBAL, shuffle=True)
    ckpt = pt.Checkpointer(rt, out / f"group{group}", model=net, optimizer=optimizer, loader=train, keep_last=2)
    ckpt.resume()
    kill_in_allreduce(rt, out)
    pause = float(os.environ.get("FT_STEP_SLEEP", "0"))
    with open(out / _name("steps", group, rank, ".jsonl"), "a") as log, \
            open(out / _name("drops", group, rank, ".jsonl"), "a") as drops:
        while train.epoch < int(os.environ.get("FT_EPOCHS", EPOCHS)):
            for x, y, ids in train:
                began = time.time()  # the step's quorum came
                whole, epoch, weight = train.slices.next_slice(), train.epoch, rt.strategy.loss_weight
                loss = F.binary_cross_entropy_with_logits(net(x), y)
                rt.backward(loss)
                if rt.step(optimizer):
                    step = rt.strategy.committed_steps
                    log.write(json.dumps({"pid": os.getpid(), "step": step, "epoch": epoch, "slice": whole,
                                          "part": ids.tolist(), "weight": weight, "parts": train.last_parts,
                                          "began": began, "time": time.time()}) + "\n")
                    log.flush()
                    if step % int(os.environ.get("FT_SAVE_EVERY", SAVE_EVERY)) == 0:
                        ckpt.save(step=step)
                else:  # the step was dropped (a peer failed it): its quorum, and when the vote said no
                    drops.write(json.dumps({"pid": os.getpid(), "began": began, "time": time.time()}) + "\n")
                    drops.flush()
                if pause and not (out / "harness-done").exists():
                    time.sleep(pause)
    state = {name: getattr(tensor, "full_tensor", lambda t=tensor: t)().tolist()  # ft-fsdp: gathered in the group
             for name, tensor in rt.unwrap(net).state_dict().items()}
    held = sum(getattr(t, "to_local", lambda t=t: t)().numel() for t in rt.unwrap(net).state_dict().values())
    final = {"state": state, "steps": rt.strategy.committed_steps, "held": held,  # elements this process holds
             "whole": sum(len(torch.tensor(v).flatten()) for v in state.values())}
    (out / _name("final", group, rank, ".json")).write_text(json.dumps(final))
    rt.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))


# ---- the harness: start a job, kill one group at random moments, read what happened ----------------

def start_job(out: Path, groups: int, nproc: int = 1, node: tuple[list[str], list[str]] | None = None, **env: str):
    """``paratrain run --fault-tolerance replicas --replica-groups GROUPS --nproc-per-node NPROC`` of this
    file, output to OUT/job.log; ``node``: (a command prefix such as ``ip netns exec NS``, the node flags
    ``--nnodes M --node-rank R …``) for one node's launcher of a job of several, output to OUT/job-R.log."""
    import subprocess

    from tests.support import clean_env, paratrain_cmd

    prefix, node_flags = node or ([], [])
    rank = node_flags[node_flags.index("--node-rank") + 1] if "--node-rank" in node_flags else None
    log = open(out / ("job.log" if rank is None else f"job-{rank}.log"), "w")
    argv = paratrain_cmd("run", "--fault-tolerance", "replicas", "--replica-groups", str(groups), *node_flags,
                         "--nproc-per-node", str(nproc), str(Path(__file__).resolve()), str(out))
    return subprocess.Popen([*prefix, *argv], env=clean_env(**env), stdout=log, stderr=subprocess.STDOUT,
                            cwd=Path(__file__).resolve().parents[2])


def records(out: Path, group: int, rank: int = 0) -> list[dict]:
    path = out / _name("steps", group, rank, ".jsonl")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait_for_every_group(out: Path, parts: int, guard_s: float = 240.0) -> None:
    """Until group 0 committed a step split into ``parts`` parts (every group of the job in its quorum): a kill
    before that could land while a slow group was still starting, and the others would not be ahead of the
    victim's next life (a guard of ``guard_s`` against a hang, not a time limit)."""
    deadline = time.monotonic() + guard_s
    while not any(r["parts"] == parts for r in records(out, 0)) and time.monotonic() < deadline:
        time.sleep(0.1)


def run_with_kills(job, out: Path, **kill_options) -> tuple[list, str]:
    """:func:`kill_at_random` on the running ``job``, then its end (a guard of 300 s against a hang, not a time
    limit; the job is killed if it is still running when anything failed). Returns the kills and the job's log,
    once the job exited 0."""
    try:
        kills = kill_at_random(job, out, **kill_options)
        code = job.wait(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    log = (out / "job.log").read_text()
    assert code == 0, log[-3000:]
    return kills, log


def kill_at_random(job, out: Path, victim: int, kills: int, rng, last_step: int, wait_for_marker: bool = False,
                   guard_s: float = 240.0, then: Callable[[], None] | None = None, rank: int = 0) -> list[dict]:
    """SIGKILL the victim group's worker (its group rank ``rank``) ``kills`` times, each at a random moment
    0.2–1.5 s after it committed a step under a pid not killed before, and wait until it is back (it
    committed under a new pid), then write ``OUT/harness-done``; no kill after committed step ``last_step``;
    with ``wait_for_marker``, none before the victim group killed itself at the all-reduce, nor before a step
    it committed after that; ``then`` runs before ``harness-done`` is written. Returns one record per kill
    (pid, the step it had reached)."""
    done, killed_pids, died_at = [], set(), 0.0
    marker = out / "killed-in-allreduce"
    deadline = time.monotonic() + guard_s
    while job.poll() is None and time.monotonic() < deadline:
        if marker.exists():
            killed_pids.add(int(marker.read_text() or 0))
            died_at = marker.stat().st_mtime  # another rank of the group may have died: its whole life ended
        elif wait_for_marker:
            time.sleep(0.1)
            continue
        latest = records(out, victim, rank)[-1:] or [None]
        if latest[0] is None or latest[0]["pid"] in killed_pids or latest[0]["time"] <= died_at:
            time.sleep(0.1)
            continue
        if latest[0]["step"] >= last_step or len(done) == kills:
            break  # the victim is back after the last kill
        time.sleep(rng.uniform(0.2, 1.5))
        pid = latest[0]["pid"]
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        killed_pids.add(pid)
        done.append({"pid": pid, "after_step": latest[0]["step"], "time": time.time()})
    if then is not None:
        then()
    (out / "harness-done").touch()
    return done


def verify(out: Path, groups: int, epochs: int = EPOCHS, nproc: int = 1) -> dict:
    """What the logs of ``groups`` groups of ``nproc`` processes say: pids per group (and per group rank),
    whether every epoch trained each sample exactly once, whether all processes agree on each committed
    step's slice, whether the parts of each step whose every process logged it are the slice, each sample
    once (``parts_checked`` steps, ``parts_wrong``), and every process's final weights' distance to
    :func:`reference` (keyed ``g`` for group rank 0, ``g.r`` for the others)."""
    per_step: dict[int, dict] = {}
    disagreements = 0
    pids, rank_pids, first_steps = {}, {}, {}
    parts: dict[int, dict[tuple[int, int], dict]] = {}
    for group in range(groups):
        for rank in range(nproc):
            lines = records(out, group, rank)
            rank_pids[f"{group}.{rank}"] = sorted({line["pid"] for line in lines})
            if rank == 0:
                pids[group] = rank_pids[f"{group}.0"]
                first_steps[group] = [next(line["step"] for line in lines if line["pid"] == pid)
                                      for pid in dict.fromkeys(line["pid"] for line in lines)]
            for line in lines:
                seen = per_step.setdefault(line["step"], line)
                disagreements += seen["slice"] != line["slice"] or seen["epoch"] != line["epoch"]
                parts.setdefault(line["step"], {})[group, rank] = line  # a step replayed from disk: its last line
    trained: dict[int, list[int]] = {}
    for step in sorted(per_step):
        trained.setdefault(per_step[step]["epoch"], []).extend(per_step[step]["slice"])
    exactly_once = sorted(trained) == list(range(epochs)) and all(
        sorted(ids) == list(range(SAMPLES)) for ids in trained.values())
    checked = wrong = 0
    for step, lines in parts.items():
        count = next(iter(lines.values()))["parts"]
        if len(lines) != count or any(line["parts"] != count for line in lines.values()):
            continue  # a process died between the commit and its line
        checked += 1
        ids = [i for line in lines.values() if line["weight"] for i in line["part"]]
        wrong += sorted(ids) != sorted(per_step[step]["slice"])
    ref = reference(epochs)
    finals = {}
    for group in range(groups):
        for rank in range(nproc):
            path = out / _name("final", group, rank, ".json")
            if path.exists():
                state = json.loads(path.read_text())["state"]
                finals[group if rank == 0 else f"{group}.{rank}"] = max(
                    float((torch.tensor(state[k]) - ref[k]).abs().max()) for k in ref)
    return {"pids": pids, "rank_pids": rank_pids, "first_steps": first_steps, "steps": sorted(per_step),
            "exactly_once": exactly_once, "disagreements": disagreements, "parts_checked": checked,
            "parts_wrong": wrong, "max_abs_diff": finals}


def lighthouse_pid(supervisor: int) -> int | None:
    """The Lighthouse among the children of ``paratrain run --fault-tolerance replicas`` (pid ``supervisor``)."""
    for child in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split():
        if "LighthouseServer" in Path(f"/proc/{child}/cmdline").read_text():
            return int(child)
    return None
