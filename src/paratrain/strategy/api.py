"""The strategy interface: how a model is placed, wrapped and synchronised."""

from __future__ import annotations

import abc
import contextlib
from typing import TYPE_CHECKING, Any, ClassVar

import torch

if TYPE_CHECKING:
    from paratrain.runtime.runtime import Runtime


class Strategy(abc.ABC):
    """One way to run a model over the job's processes (single, dp, ddp, fsdp, …).

    Subclasses live one per file and register by ``name``; callers never test the
    concrete class. Whatever a caller needs to know (sharded state? no-sync context?)
    is a method or attribute here.
    """

    name: ClassVar[str]
    #: True when each rank holds only a shard of the state (checkpoints via DCP).
    sharded_state: ClassVar[bool] = False

    def __init__(self, runtime: Runtime, sync_batchnorm: bool = False, compile: bool = False, **options: Any):
        self.runtime = runtime
        self.sync_batchnorm = sync_batchnorm
        self.compile = compile
        self.options = options

    @property
    def precision(self):
        return self.runtime.precision

    @abc.abstractmethod
    def setup(self, model: torch.nn.Module, *optimizers: torch.optim.Optimizer):
        """Wrap ``model`` for this strategy; return ``model`` or ``(model, *optimizers)``."""

    def backward(self, loss: torch.Tensor, model: torch.nn.Module | None = None) -> None:
        self.precision.backward(loss)

    def step(self, optimizer: torch.optim.Optimizer, clip_norm: float | None = None, model=None):
        return self.precision.step(optimizer, clip_norm=clip_norm, clip=self.clip_grad_norm)

    def clip_grad_norm(self, parameters, max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    def accumulate(self, model: torch.nn.Module, sync: bool = True) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        while True:
            inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
            if not isinstance(inner, torch.nn.Module):
                return model
            model = inner
