"""One member of an ft ring, started by tests/strategy/test_ft_rings.py: set the ring up on the quorum's store
at STORE_ADDR as RANK of WORLD, all-reduce a one, print what happened as one JSON line."""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

import torch


def main(store_addr: str, rank: int, world: int) -> None:
    from paratrain.strategy.ft_rings import ring

    group = ring("cpu", timedelta(seconds=10))
    started = time.monotonic()
    try:
        group.configure(store_addr, f"group{rank}", rank, world, 1, 0, 1, list(range(world)))
    except Exception as exc:  # what torchft's Manager records as the step's error
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}", "s": time.monotonic() - started}), flush=True)
        return
    total = torch.ones(1)
    group.allreduce([total], torch.distributed.AllreduceOptions()).wait()
    print(json.dumps({"sum": total.item(), "s": time.monotonic() - started}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
