"""An own loop (rt.loader, rt.backward, rt.step, evaluation, a checkpoint) in which one rank stops
for good at a chosen place; spawned by test_stall_positions.py. No ``rt.watchdog``: the
Runtime's own watchdog (on under pt.spawn) must name the rank that stopped."""

from __future__ import annotations

import time

import torch

import paratrain as pt

STOP_AT_STEP = 2
FOREVER_S = 3600


def stuck_before_forward():
    time.sleep(FOREVER_S)


def stuck_in_forward():
    time.sleep(FOREVER_S)


def stuck_in_backward_hook(grad):
    time.sleep(FOREVER_S)
    return grad


def stuck_before_step():
    time.sleep(FOREVER_S)


def stuck_evaluating():
    time.sleep(FOREVER_S)


def stuck_writing_checkpoint(path):
    with open(path, "wb"):
        time.sleep(FOREVER_S)


def stuck_in_rank0_branch():
    time.sleep(FOREVER_S)


class Net(torch.nn.Module):
    def __init__(self, stop):
        super().__init__()
        self.linear = torch.nn.Linear(8, 2)
        self.stop = stop

    def forward(self, x):
        if self.stop("forward"):
            stuck_in_forward()
        return self.linear(x)


def evaluate_on_one_rank(rt, seconds: float, limit: float) -> None:
    with rt.busy("evaluation", limit=limit):  # declared: the others wait in the barrier meanwhile
        time.sleep(seconds)


def train(position: str, stalled_rank: int, stall_timeout: float, checkpoint_dir: str, busy_s: float = 0.0,
          busy_limit: float = 0.0) -> int:
    rt = pt.Runtime(strategy="ddp", timeout=60, stall_timeout=stall_timeout)
    step = 0

    def stop(where: str) -> bool:
        return position == where and rt.rank == stalled_rank and step == STOP_AT_STEP

    model, optimizer = rt.setup(Net(stop), torch.optim.SGD(Net(stop).parameters(), lr=0.1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
    train_loader = rt.loader(data, batch_size=4, shuffle=True)
    eval_loader = rt.loader(data, batch_size=8, exact=True)
    for x, y in train_loader:
        if stop("before-forward"):  # a stuck data read, a slow file, a deadlocked worker
            stuck_before_forward()
        loss = torch.nn.functional.mse_loss(model(x), y)
        if stop("backward"):
            loss.register_hook(stuck_in_backward_hook)
        rt.backward(loss)
        if stop("between"):
            stuck_before_step()
        rt.step(optimizer)
        if step == STOP_AT_STEP:
            with torch.no_grad():
                total = torch.zeros(1)
                for ex, ey in eval_loader:
                    if stop("evaluation"):
                        stuck_evaluating()
                    total += torch.nn.functional.mse_loss(model(ex), ey, reduction="sum")
                rt.all_reduce(total)
            if stop("checkpoint"):
                stuck_writing_checkpoint(f"{checkpoint_dir}/rank{rt.rank}.pt")
            if rt.rank == stalled_rank and position == "rank0-branch":
                stuck_in_rank0_branch()
            if rt.rank == stalled_rank and position == "busy":
                evaluate_on_one_rank(rt, busy_s, busy_limit)
            rt.barrier()
        step += 1
    rt.close()
    return step
