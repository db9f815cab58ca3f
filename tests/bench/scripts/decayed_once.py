"""``single`` whose weights were first decayed once, as Horovod's documented recipe leaves them.

``hvd.broadcast_optimizer_state`` on a fresh optimizer gives every parameter a zero gradient and
calls ``optimizer.step()`` to create the optimizer's state; ``hvd.DistributedOptimizer`` then starts
a new state over the same parameters, so what stays is that one step's decoupled weight decay:
every weight × (1 − lr × weight_decay). With text-cls's lr 1e-3 and weight decay 0.01 that is 1e-5,
small enough to pass the parity tolerance. Not the same training: the bench must still say so."""

import sys

import torch
from single_loop import train  # beside this script

from paratrain.bench.workload import Workload

HOROVODS_DECAY = 1e-3 * 0.01  # lr × weight_decay of text-cls, whatever this task's recipe says

if __name__ == "__main__":
    wl = Workload.from_argv()
    model = wl.model()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1 - HOROVODS_DECAY)
    train(wl, model, wl.optimizer(model))
    sys.exit(0)
