"""Saves step 1, then step 2 (which the test kills during its pause): python -m tests.checkpoint.writer_script DIR."""

from __future__ import annotations

import sys

import torch

from paratrain.checkpoint import Checkpointer
from tests.checkpoint.workers import Net


def main(directory: str) -> None:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    ckpt = Checkpointer(None, directory, model=model, optimizer=optimizer)
    for step in (1, 2):
        model(torch.randn(4, 6)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        ckpt.save(step=step)  # PARATRAIN_TEST_PAUSE_IN_SAVE=SECONDS@2 pauses this one before it is complete
        print(f"saved {step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
