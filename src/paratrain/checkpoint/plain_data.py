"""What a checkpoint may store outside of model weights: plain data only.

Everything saved with ``torch.save`` is read back with ``weights_only=True``, which
accepts tensors, numbers, strings, bytes, ``None``, lists, tuples, sets, dicts,
torch dtypes, devices and sizes. Checking this when *saving* turns "my run cannot
resume" weeks later into an error now that names the object and the key.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

from paratrain.errors import CheckpointError

# Exact types: subclasses such as numpy.float64 (a float) pickle as their own class.
_LEAVES = {bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size}
_CONTAINERS = (dict, collections.OrderedDict, list, tuple, set)


def first_non_plain(value: Any, where: str = "") -> tuple[str, str] | None:
    """``(key path, type name)`` of the first value ``torch.load(weights_only=True)`` would refuse."""
    kind = type(value)
    if kind in _LEAVES or isinstance(value, torch.Tensor):
        return None
    if kind not in _CONTAINERS:
        return where or "<top>", f"{kind.__module__}.{kind.__qualname__}"
    if isinstance(value, dict):
        for key, item in value.items():
            found = first_non_plain(key, f"{where}[key {key!r}]") or first_non_plain(item, f"{where}[{key!r}]")
            if found:
                return found
        return None
    for index, item in enumerate(value):
        found = first_non_plain(item, f"{where}[{index}]")
        if found:
            return found
    return None


def check_plain(value: Any, owner: str) -> None:
    """Refuse state that could not be loaded back without unpickling objects.

    Raises:
        CheckpointError: names the object, the key and the type to convert.
    """
    found = first_non_plain(value)
    if found:
        where, type_name = found
        raise CheckpointError(
            f"{owner}.state_dict() holds a {type_name} at {where}; checkpoints store only tensors, numbers, "
            "strings, lists and dicts (they are loaded without unpickling objects): convert it in state_dict() "
            "(e.g. int(x), x.tolist(), torch.as_tensor(x))"
        )
