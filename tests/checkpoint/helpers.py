"""In-process helpers: a small model with an optimizer, checkpoints of it at a few steps."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import torch

from paratrain.checkpoint import Checkpointer
from tests.checkpoint.workers import Net


def trained(seed: int = 0, hidden: int = 16):
    torch.manual_seed(seed)
    model = Net(hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    return model, optimizer


def train_one_step(model, optimizer) -> None:
    model(torch.randn(4, 6)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def save_steps(directory: Path, steps=(1, 2), **options) -> dict[int, dict[str, torch.Tensor]]:
    """Checkpoints at ``steps`` of one training run; returns the weights saved at each."""
    model, optimizer = trained()
    ckpt = Checkpointer(None, directory, model=model, optimizer=optimizer, **options)
    weights = {}
    for step in steps:
        train_one_step(model, optimizer)
        ckpt.save(step=step)
        weights[step] = {k: v.clone() for k, v in model.state_dict().items()}
    return weights


def fresh_checkpointer(directory: Path, seed: int = 99):
    model, optimizer = trained(seed)
    return model, Checkpointer(None, directory, model=model, optimizer=optimizer)


def same_weights(model, weights) -> bool:
    state = model.state_dict()
    return state.keys() == weights.keys() and all(torch.equal(state[k], weights[k]) for k in state)


def flip_byte(path: Path, offset: int = -20) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@contextlib.contextmanager
def copy_only_once_the_step_waits(ckpt: Checkpointer, owner: Any, method: str):
    """While inside, ``owner.method`` (what a writing thread calls to copy the optimizers' state) runs only once an
    optimizer step waits for that copy (or after 10 s: the step did not wait)."""
    real, release = getattr(owner, method), threading.Event()

    def slow(*args, **kwargs):
        release.wait(10)
        return real(*args, **kwargs)

    class Waiting(threading.Event):
        def wait(self, timeout=None):
            release.set()
            return super().wait(timeout)

    ckpt.copies_before_step._done = Waiting()
    ckpt.copies_before_step._done.set()
    setattr(owner, method, slow)
    try:
        yield
    finally:
        setattr(owner, method, real)
