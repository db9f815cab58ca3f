"""Top-level worker functions for the runtime tests (spawned children import them)."""

from __future__ import annotations

import torch

import paratrain as pt


def groups_one_after_another(times: int) -> list[float]:
    """Make, use and close a Runtime ``times`` times in this process; the sums all-reduced."""
    sums = []
    for round_ in range(times):
        rt = pt.Runtime(strategy="ddp", timeout=60)
        model = rt.setup(torch.nn.Linear(4, 1))
        sums.append(float(pt.all_reduce(torch.tensor(float(rt.rank + round_)), op="sum")))
        del model  # the DDP wrapper goes before its group (see Runtime.close)
        rt.close()
    return sums
