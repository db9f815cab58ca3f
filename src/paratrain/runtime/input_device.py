"""A forward whose inputs all sit on another device than the model fails in one line, on any device.

Left to torch, CPU labels beside CUDA logits fail deep inside the loss with "Expected all tensors to
be on the same device", and only on a GPU machine: a script tried on a laptop passes. The check
compares the device *type* of the model (``rt.device``) with that of every tensor the set-up
model is called with, and refuses a call none of whose tensors is on it — so it also fails on a
CPU machine when a batch sits on another device (``meta`` in the tests). A call with some tensors
on the device passes: lengths for ``pack_padded_sequence`` stay on the CPU on purpose. Strategies
whose wrapper moves the inputs itself (``Strategy.moves_inputs``: DataParallel scatters them,
FSDP2's root moves them) are not checked.
"""

from __future__ import annotations

from typing import Any

import torch

from paratrain.data.batches import tensor_devices
from paratrain.errors import ConfigError


def refuse_inputs_elsewhere(model: torch.nn.Module, device: torch.device) -> None:
    """Make ``model``'s forward raise :class:`ConfigError` when no tensor input is on ``device``'s type."""

    def check(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        devices = tensor_devices((args, kwargs))
        if devices and all(found.type != device.type for found in devices):
            where = ", ".join(sorted(str(found) for found in devices))
            raise ConfigError(f"the model runs on {device} and this forward's inputs are on {where}: take batches "
                              "from rt.loader (it moves them to rt.device) or move them with .to(rt.device)")

    model.register_forward_pre_hook(check, with_kwargs=True)
