"""The job every replica group runs in the ft-ddp tests and benchmarks (``paratrain run
--fault-tolerance replicas … tests/strategy/ft_workers.py OUT``), and the uninterrupted reference.

Each group trains ``EPOCHS`` epochs of a seeded order over ``SAMPLES`` rows in global batches of
``GLOBAL``, checkpoints to ``OUT/group<i>`` every ``SAVE_EVERY`` committed steps, and appends one
line per committed step to ``OUT/steps-<i>.jsonl``: its pid, the committed step, the epoch, the
step's whole slice and its own part. ``FT_KILL_IN_ALLREDUCE=G:S`` makes group G kill itself with
SIGKILL inside the gradient all-reduce of committed step S, once per run (a marker file in OUT).
``FT_STEP_SLEEP`` seconds between steps stretch the run (the kills need time to land).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SAMPLES, GLOBAL, EPOCHS, SAVE_EVERY, LR = 240, 16, 3, 5, 0.05
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


def reference() -> dict[str, torch.Tensor]:
    """One process, no failure: every step the whole slice, its mean loss, the same order."""
    from paratrain.data.committed_slices import CommittedSlices

    net, rows = model(), Rows()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    slices = CommittedSlices(len(rows), GLOBAL, seed=SEED)
    while slices.epoch < EPOCHS:
        while not slices.epoch_done:
            ids = slices.next_slice()
            loss = F.binary_cross_entropy_with_logits(net(rows.x[ids]), rows.y[ids])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            slices.commit()
        slices.next_epoch()
    return net.state_dict()


def kill_in_allreduce(rt, out: Path) -> None:
    """Group G of ``FT_KILL_IN_ALLREDUCE=G:S`` dies inside the all-reduce of step S (once)."""
    spec = os.environ.get("FT_KILL_IN_ALLREDUCE", "")
    marker = out / "killed-in-allreduce"
    if not spec or marker.exists():
        return
    group, step = map(int, spec.split(":"))
    if group != rt.strategy.group:
        return
    manager = rt.strategy.manager
    issue = manager.allreduce

    def allreduce_then_die(tensor, *args, **kwargs):
        work = issue(tensor, *args, **kwargs)  # the peers are in the collective with us now
        if manager.current_step() == step:
            marker.write_text(str(os.getpid()))
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        return work

    manager.allreduce = allreduce_then_die


def main(out: Path) -> None:
    import paratrain as pt

    rt = pt.Runtime(strategy="ft-ddp", seed=SEED)
    group = rt.strategy.group
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR)
    net, optimizer = rt.setup(net, optimizer)
    train = rt.loader(Rows(), batch_size=GLOBAL, shuffle=True)
    ckpt = pt.Checkpointer(rt, out / f"group{group}", model=net, optimizer=optimizer, loader=train, keep_last=2)
    ckpt.resume()
    kill_in_allreduce(rt, out)
    pause = float(os.environ.get("FT_STEP_SLEEP", "0"))
    with open(out / f"steps-{group}.jsonl", "a") as log:
        while train.epoch < EPOCHS:
            for x, y, ids in train:
                whole, epoch = train.slices.next_slice(), train.epoch
                loss = F.binary_cross_entropy_with_logits(net(x), y)
                rt.backward(loss)
                if rt.step(optimizer):
                    step = rt.strategy.committed_steps
                    log.write(json.dumps({"pid": os.getpid(), "step": step, "epoch": epoch, "slice": whole,
                                          "part": ids.tolist(), "time": time.time()}) + "\n")
                    log.flush()
                    if step % SAVE_EVERY == 0:
                        ckpt.save(step=step)
                time.sleep(pause)
    state = {name: tensor.tolist() for name, tensor in rt.unwrap(net).state_dict().items()}
    (out / f"final-{group}.json").write_text(json.dumps({"state": state, "steps": rt.strategy.committed_steps}))
    rt.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
