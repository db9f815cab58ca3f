"""``single`` with twice the learning rate: a method that trains something else (parity must flag it)."""

import sys

from single_loop import train  # beside this script

from paratrain.bench.workload import Workload

if __name__ == "__main__":
    wl = Workload.from_argv()
    model = wl.model()
    train(wl, model, wl.optimizer(model, lr_scale=2.0))
    sys.exit(0)
