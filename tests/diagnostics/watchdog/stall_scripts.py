"""An own loop in which rank 1 sleeps at the top of step 3, in two flavours (run by test_stall_cli.py):

    paratrain run --nproc-per-node 2 stall_scripts.py paratrain [--explicit]   # pt.Runtime, rt.backward, rt.step
    paratrain run --nproc-per-node 2 stall_scripts.py torch                    # plain torch.distributed, no paratrain
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch

TIMEOUT_S = 6


def paratrain_loop(explicit: bool) -> None:
    import paratrain as pt

    # With --explicit, as in a loop that asks for a watchdog: its stall timeout below the group's.
    rt = pt.Runtime(strategy="ddp", timeout=10 * TIMEOUT_S if explicit else TIMEOUT_S)
    model, optimizer = rt.setup(torch.nn.Linear(8, 2), torch.optim.SGD(torch.nn.Linear(8, 2).parameters(), lr=0.1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def loop():
        for step in range(1, 10):
            if rt.rank == 1 and step == 3:
                time.sleep(3600)  # a stuck data read
            rt.backward(model(torch.randn(4, 8)).sum())
            rt.step(optimizer)

    if explicit:
        with rt.watchdog(stall_timeout=TIMEOUT_S):
            loop()
    else:
        loop()
    rt.close()


def torch_loop() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 10):
        if dist.get_rank() == 1 and step == 3:
            time.sleep(3600)  # a stuck data read
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "torch":
        torch_loop()
    else:
        paratrain_loop("--explicit" in sys.argv)
