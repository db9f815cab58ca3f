"""Batches of any shape — tensors in dicts, lists, tuples, namedtuples and dataclasses: moved onto the
device (:func:`move_to`), their samples counted (:func:`batch_length`).

``rt.loader`` hands out batches already on ``rt.device`` (Accelerate's and Fabric's loaders do the
same), so a script written for one CPU runs on a GPU unchanged. The containers are walked by
torch's own pytree (dicts, lists, tuples, namedtuples, ``OrderedDict``, ``defaultdict``, ``deque``);
a dataclass and any other mapping (Hugging Face's ``BatchEncoding``) is rebuilt around its moved
values; anything else (strings, numbers, ``None``) is left as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree


def move_to(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor on ``device`` (a tensor already there is returned as it is).

    A copy from pinned host memory to a GPU is asynchronous (``non_blocking``): the
    host goes on while the copy runs, and the GPU's stream orders it before the
    kernels that read it. Any other copy blocks — a non-blocking copy *to* the host
    could be read before it has arrived.
    """
    device = torch.device(device)
    return pytree.tree_map(lambda leaf: _move_leaf(leaf, device), batch)


def _move_leaf(leaf: Any, device: torch.device) -> Any:
    if isinstance(leaf, torch.Tensor):
        # is_pinned() is asked only for a copy to a GPU: on CPU it is a call per tensor per step for nothing.
        return leaf.to(device, non_blocking=device.type == "cuda" and leaf.is_pinned())
    if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
        moved = {field.name: move_to(getattr(leaf, field.name), device) for field in dataclasses.fields(leaf) if field.init}
        return dataclasses.replace(leaf, **moved)
    if isinstance(leaf, Mapping):  # a mapping pytree does not know (a dict subclass, BatchEncoding)
        return type(leaf)({key: move_to(value, device) for key, value in leaf.items()})
    return leaf


def tensor_devices(inputs: Any) -> set[torch.device]:
    """The devices of the tensors in ``inputs`` (walked as :func:`move_to` walks a batch)."""
    return {leaf.device for leaf in pytree.tree_leaves(inputs) if isinstance(leaf, torch.Tensor)}


def batch_length(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch
    for value in values:
        if isinstance(value, (torch.Tensor, dict, list, tuple)):
            return batch_length(value)
    return 1
