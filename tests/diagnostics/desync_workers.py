"""pt.spawn workers for the desync tests: each case makes the ranks differ in one way."""

from __future__ import annotations

import torch

import paratrain as pt
from paratrain.diagnostics.desync import check_same_setup
from paratrain.errors import ParatrainError


def differing_ranks() -> tuple[list[str], bool]:
    """Run every case on each rank; return the error each case raised, and whether all ranks got the same."""
    rt = pt.Runtime(strategy="ddp", timeout=30)
    rank = rt.rank
    messages = []
    cases = [
        lambda: rt.setup(torch.nn.Linear(4, 3 if rank == 0 else 5)),  # model structure
        lambda: check_same_setup(rt, config={"lr": 0.1, "epochs": 3 if rank == 0 else 4}),  # config
        lambda: rt.loader(torch.utils.data.TensorDataset(torch.zeros(10 + rank, 2)), batch_size=2),  # data
    ]
    for case in cases:
        try:
            case()
            messages.append("no error")
        except ParatrainError as exc:
            messages.append(f"{type(exc).__name__}: {exc}")
    same_everywhere = all(other == messages for other in pt.all_gather_object(messages))
    rt.close()
    return messages, same_everywhere
