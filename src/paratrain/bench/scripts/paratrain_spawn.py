"""DDP started from a function (the ``mp.spawn`` pattern): ``pt.spawn(train, nprocs=N)``."""

from __future__ import annotations

import sys

import paratrain as pt
from paratrain.bench.scripts.paratrain_loop import train
from paratrain.bench.spec import BenchSpec

if __name__ == "__main__":
    spec = BenchSpec.load(sys.argv[1])
    pt.spawn(train, nprocs=spec.nproc, args=(sys.argv[1],))
