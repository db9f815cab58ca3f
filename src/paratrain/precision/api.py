"""The precision interface: autocast, backward, optimizer step."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from typing import ClassVar

import torch


class Precision(abc.ABC):
    name: ClassVar[str]

    def __init__(self, device: torch.device):
        self.device = device

    def autocast(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, optimizer: torch.optim.Optimizer, clip_norm: float | None, clip: Callable) -> torch.Tensor | None:
        norm = None
        if clip_norm is not None:
            params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
            norm = clip(params, clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
