"""An optimizer's state written as a few flat tensors, so that saving it costs bytes rather than Python.

``torch.save`` pickles every tensor on its own: for each one a rebuild tuple, its size and stride tuples and a
storage reference, every object passing through torch's ``persistent_id`` in Python. An Adam optimizer has three
tensors per parameter, so that is most of what a background write costs the process's CPU (9–13 ms of the writing
thread's ~35 ms for text-cls's 1 M parameters, measured with ``time.thread_time``), and through the interpreter
lock the training thread's too. :func:`pack` turns the state into

* ``skeleton``: the same containers and plain values, with ``None`` where each tensor was;
* ``flats``: one 1-D tensor per (dtype, device), every tensor of that kind flattened into it, in order;
* ``layout``: one int64 tensor, a row per tensor: its place among the skeleton's leaves, its flat, its offset
  in it, its number of dimensions and its sizes;

which ``torch.save`` writes as a handful of objects and one record per flat. :func:`unpack` (run by
:func:`paratrain.checkpoint.safe_load.load_pt` on every ``.pt`` file, so every reader gets the state back) rebuilds
the containers and gives each tensor back as a contiguous tensor of its own. The file still holds plain data only
(``torch.load(weights_only=True)`` reads it).

A leaf is every value of a dict (in insertion order, which pickling keeps) and every item of a list or tuple that
is not itself one of those containers; both functions count them in the same walk. Only plain, dense, contiguous
tensors are packed; a state holding any other (a tensor subclass, a sparse or non-contiguous one, a conjugate view)
is saved as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

#: The key that marks a packed state (a state of its own never has it: optimizer states hold "state" and
#: "param_groups").
PACKED = "paratrain.packed"
VERSION = 1


def _packable(tensor: torch.Tensor) -> bool:
    return (type(tensor) is torch.Tensor and tensor.layout == torch.strided and tensor.is_contiguous()
            and not tensor.is_conj() and not tensor.is_neg() and not tensor.requires_grad)


def rebuilt(value: Any, leaf: Callable[[int, Any], Any]) -> Any:
    """``value``'s containers (dicts, lists, tuples of exactly those types) rebuilt, every other value replaced by
    ``leaf(its index among the leaves, the value)``; the one walk :func:`pack` and :func:`unpack` both take."""
    count = 0

    def walk(item: Any) -> Any:
        nonlocal count
        if type(item) is dict:
            return {key: walk(inner) for key, inner in item.items()}
        if type(item) is list:
            return [walk(inner) for inner in item]
        if type(item) is tuple:
            return tuple(walk(inner) for inner in item)
        count += 1
        return leaf(count - 1, item)

    return walk(value)


def pack(state: Any) -> Any:
    """``state`` in packed form, or ``state`` itself when it holds no tensor or one that cannot be packed, or is
    packed already (:meth:`paratrain.checkpoint.snapshot.HostBuffers.packed` copies into this form)."""
    if is_packed(state):
        return state
    tensors: list[tuple[int, torch.Tensor]] = []  # (leaf index, tensor)

    def hole(index: int, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            tensors.append((index, value))
            return None
        return value

    skeleton = rebuilt(state, hole)
    if not tensors or not all(_packable(tensor) for _, tensor in tensors):
        return state
    kinds, _, spans, layout = flat_layout([(leaf, (t.dtype, t.device), t.shape) for leaf, t in tensors])
    parts: list[list[torch.Tensor]] = [[] for _ in kinds]
    for (group, _, _), (_, tensor) in zip(spans, tensors):
        parts[group].append(tensor.reshape(-1))
    flats = [torch.cat(part) if len(part) > 1 else part[0].clone() for part in parts]
    return {PACKED: VERSION, "skeleton": skeleton, "flats": flats, "layout": layout}


def flat_layout(tensors: list[tuple[int, Any, torch.Size]]) -> tuple[list[Any], list[int], list[tuple[int, int, int]],
                                                                    torch.Tensor]:
    """Where tensors given as ``(leaf index, kind, shape)``, in order, lie in the flats of the packed form (one flat
    per kind, in the order each kind first appears): the kinds, each flat's number of elements, each tensor's
    ``(flat, offset, number of elements)``, and the ``layout`` tensor that is written (a row per tensor: its leaf
    index, its flat, its offset, its number of dimensions and its sizes, padded with zeros). :func:`pack` and
    :meth:`paratrain.checkpoint.snapshot.HostBuffers.packed` both lay out with it."""
    kinds: dict[Any, int] = {}
    sizes: list[int] = []
    spans: list[tuple[int, int, int]] = []
    rows: list[list[int]] = []
    for leaf, kind, shape in tensors:
        group = kinds.setdefault(kind, len(kinds))
        if group == len(sizes):
            sizes.append(0)
        numel = shape.numel()
        rows.append([leaf, group, sizes[group], len(shape), *shape])
        spans.append((group, sizes[group], numel))
        sizes[group] += numel
    width = max(len(row) for row in rows)
    layout = torch.tensor([row + [0] * (width - len(row)) for row in rows], dtype=torch.int64)
    return list(kinds), sizes, spans, layout


def is_packed(loaded: Any) -> bool:
    return type(loaded) is dict and PACKED in loaded


def _tensors_by_leaf(flats: list[torch.Tensor], layout: torch.Tensor) -> dict[int, torch.Tensor]:
    """Each packed tensor, a copy of its own, by its place among the skeleton's leaves."""
    by_leaf: dict[int, torch.Tensor] = {}
    for leaf, group, offset, ndim, *sizes in layout.tolist():
        shape = sizes[:ndim]
        numel = 1
        for size in shape:
            numel *= size
        flat = flats[group]
        if offset < 0 or min(shape, default=0) < 0 or offset + numel > flat.numel():
            raise IndexError(f"packed tensor {leaf} lies outside its flat tensor")
        by_leaf[leaf] = flat[offset:offset + numel].view(shape).clone()
    return by_leaf


def unpack(loaded: Any) -> Any:
    """What :func:`pack` was given, from what it returned (read back); anything else as it is.

    Raises:
        ValueError: a packed state whose parts do not fit together (a damaged or foreign file).
    """
    if not is_packed(loaded):
        return loaded
    if loaded[PACKED] != VERSION:
        raise ValueError(f"packed state of version {loaded[PACKED]!r}; this paratrain reads version {VERSION}")
    try:
        skeleton, by_leaf = loaded["skeleton"], _tensors_by_leaf(loaded["flats"], loaded["layout"])
    except (KeyError, IndexError, TypeError, AttributeError, RuntimeError) as exc:
        raise ValueError(f"packed state whose parts do not fit together ({exc!r})") from exc
    state = rebuilt(skeleton, lambda index, value: by_leaf.pop(index, value))
    if by_leaf:
        raise ValueError(f"{len(by_leaf)} packed tensor(s) have no place in the skeleton")
    return state
