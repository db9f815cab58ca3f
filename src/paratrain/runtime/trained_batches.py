"""What the optimizer has trained, told to a Runtime's training loaders.

The invariant: **a saved data position is what the optimizer has consumed, not what the
loader has handed out.** Loops draw batches ahead — nanoGPT fetches ``X, Y`` between the
forward and the backward of a micro-step, others at the end of the body — and save at the
top of the next iteration; a position counting handed-out batches skips the drawn one on
resume, in silence. The Runtime sees the two moments that say what was trained: the forward
of a model ``rt.setup`` returned (a forward pre-hook) and an ``rt.step`` that stepped. A step
trains the batches handed out before the last forward since the previous step (all handed
out, when the loop ran no such forward), and each training loader counts those
(:meth:`paratrain.data.loader.DistributedLoader.optimizer_stepped`).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch


class TrainedBatches:
    """One per Runtime: its training loaders, its models' forwards, its optimizer steps."""

    def __init__(self) -> None:
        self._loaders: weakref.WeakSet[Any] = weakref.WeakSet()

    def track(self, loader: Any) -> None:
        """Count ``loader``'s consumed batches by optimizer steps from now on."""
        loader.count_trained_batches()
        self._loaders.add(loader)

    def watch(self, model: torch.nn.Module) -> None:
        """Hear ``model``'s forwards (the outermost wrapper: outside ``torch.compile``'s graph)."""
        model.register_forward_pre_hook(self._forward)

    def _forward(self, module: torch.nn.Module, args: Any) -> None:
        for loader in self._loaders:
            loader.model_forward()

    def stepped(self) -> None:
        """An optimizer step ran (``rt.step`` returned true)."""
        for loader in self._loaders:
            loader.optimizer_stepped()
