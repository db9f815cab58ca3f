"""The part of a background save that blocks training: the state copied to host memory, quickly.

Two costs remain once the files are written by a thread (:mod:`.background`): reading the state through
``torch.distributed.checkpoint.state_dict`` (about 2 ms of Python per model or optimizer, whatever its
size) and copying the tensors. :class:`LiveState` reads the model and optimizer in the layout torch's
``get_model_state_dict`` / ``get_optimizer_state_dict`` give, from ``module.state_dict()`` and
``optimizer.state`` directly, after checking once that this gives exactly torch's answer (the same keys,
the very same tensors, the same hyperparameters); anything else (DTensors, a layout it does not match)
is read through torch every time. :class:`HostBuffers` copies into host buffers kept from one save to the
next (page-locked for GPU tensors, copied without waiting for the GPU; :meth:`HostBuffers.ready` waits), one
``torch._foreach_copy_`` per part, and every part but a model's straight into the packed form its file holds.
:class:`CopiesBeforeStep` leaves the copy of an optimizer's state (two thirds of the bytes with Adam) to the
writing thread, which makes it while training runs the next forward and backward, before that optimizer's
next step.
"""

from __future__ import annotations

import copy
import threading
import time
import weakref
from typing import Any

import torch

from paratrain import comm
from paratrain.checkpoint.model_state import (
    model_layout,
    model_state,
    optimizer_is_fresh,
    optimizer_state,
)
from paratrain.checkpoint.packed import PACKED, VERSION, flat_layout, rebuilt
from paratrain.errors import CheckpointError
from paratrain.goodput import ledger


class HostBuffers:
    """Host copies of a state that training cannot change, into buffers reused between saves.

    The buffers of one save are handed to the writer; the next :meth:`copy` or :meth:`packed` overwrites them, so
    it is called only after the previous write is complete (a background save waits for it first). The tensors of
    one call are copied by one ``torch._foreach_copy_``: a call into torch per tensor cost the thread that copies
    (and, through the interpreter lock, a training thread beside it) ~10 µs of Python each.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[Any, ...], torch.Tensor] = {}
        self._flats: dict[tuple[Any, ...], _Flats] = {}
        self._event: Any = None

    def copy(self, state: Any, path: tuple[Any, ...] = ()) -> Any:
        """``state`` with every tensor copied to host memory (containers rebuilt, other objects
        deep-copied; numbers and strings are immutable). GPU copies may still be in flight: see :meth:`ready`."""
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (host buffer, tensor), copied together at the end
        copied = self._copy(state, path, pairs)
        self._copy_pairs(pairs)
        return copied

    def packed(self, state: Any, path: tuple[Any, ...] = ()) -> Any:
        """What ``pack(self.copy(state, path))`` gives (:func:`paratrain.checkpoint.packed.pack`: the same file
        bytes), made without the intermediate copies: every tensor copied straight into its place in flat host
        tensors laid out once and kept while the tensors' kinds and shapes stay the same. A state holding a tensor
        that cannot be packed (a DTensor, a subclass, a sparse one): :meth:`copy`'s answer, which ``pack`` leaves
        as it is. GPU copies may still be in flight: see :meth:`ready`."""
        places: list[int] = []  # each tensor's place among the state's leaves
        tensors: list[torch.Tensor] = []

        def hole(index: int, value: Any) -> Any:
            if isinstance(value, torch.Tensor):  # copied under no_grad: no detach() (a call into torch per tensor)
                places.append(index)
                tensors.append(value)
                return None
            return value if value is None or isinstance(value, _IMMUTABLE) else copy.deepcopy(value)

        skeleton = rebuilt(state, hole)
        if not tensors or not all(type(t) is torch.Tensor and t.layout == torch.strided and t.device.type in _FOREACH
                                  for t in tensors):
            return self.copy(state, path)
        shapes = [(place, t.dtype, t.shape) for place, t in zip(places, tensors)]
        pin = any(t.is_cuda for t in tensors) and torch.cuda.is_available()
        flats = self._flats.get(path)
        if flats is None or flats.shapes != shapes or flats.pinned != pin:
            flats = self._flats[path] = _Flats(shapes, pin)
        self._copy_pairs(list(zip(flats.views, tensors)))
        return {PACKED: VERSION, "skeleton": skeleton, "flats": flats.flats, "layout": flats.layout}

    def _copy(self, state: Any, path: tuple[Any, ...], pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
        if isinstance(state, torch.Tensor):
            return self._tensor(state, path, pairs)
        if isinstance(state, dict):
            return {key: self._copy(value, (*path, key), pairs) for key, value in state.items()}
        if isinstance(state, list):
            return [self._copy(value, (*path, index), pairs) for index, value in enumerate(state)]
        if isinstance(state, tuple) and not hasattr(state, "_fields"):
            return tuple(self._copy(value, (*path, index), pairs) for index, value in enumerate(state))
        if state is None or isinstance(state, _IMMUTABLE):
            return state
        return copy.deepcopy(state)

    def _tensor(self, tensor: torch.Tensor, path: tuple[Any, ...],
                pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        if getattr(tensor, "_local_tensor", None) is not None or tensor.is_sparse:  # not a plain dense tensor
            return tensor.detach().to("cpu", copy=True)
        buffer = self._buffers.get(path)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            pin = tensor.is_cuda and torch.cuda.is_available()
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pin)
            self._buffers[path] = buffer
        if tensor.device.type in _FOREACH:
            pairs.append((buffer, tensor))
        else:  # another accelerator: copied on its own, waiting for it
            buffer.copy_(tensor.detach())
        return buffer

    def _copy_pairs(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """:func:`copy_to_host`; its event, when the copies came from a GPU, is what :meth:`ready` waits for."""
        event = copy_to_host(pairs)
        if event is not None:
            self._event = event

    def ready(self) -> None:
        """Wait until the copies of the last :meth:`copy` are in host memory (GPU copies; no-op on CPU).
        Any thread."""
        if self._event is not None:
            self._event.synchronize()


def copy_to_host(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """Each tensor of ``pairs`` (host buffer, tensor) into its buffer, in one call into torch. From a GPU, copies the
    GPU makes after the work queued before them while Python goes on (``non_blocking``; torch copies tensor by
    tensor when the lists span devices): the answer is a CUDA event recorded after them, to wait for before the
    buffers are read; None when no tensor was on a GPU (the copies are done)."""
    if not pairs:
        return None
    on_gpu = any(tensor.is_cuda for _, tensor in pairs)
    with torch.no_grad():
        torch._foreach_copy_([buffer for buffer, _ in pairs], [tensor for _, tensor in pairs], non_blocking=on_gpu)
    if not on_gpu:
        return None
    event = torch.cuda.Event()
    event.record()
    return event


_IMMUTABLE = (bool, int, float, str, bytes)
_FOREACH = ("cpu", "cuda")  # the devices whose tensors one torch._foreach_copy_ copies to host memory


class _Flats:
    """Flat host tensors that hold a state's tensors in :func:`~paratrain.checkpoint.packed.pack`'s layout: one per
    dtype, in the order each dtype first appears; ``views`` in them, one per tensor, in the state's order;
    ``layout`` the rows ``pack`` writes (a tensor's place among the state's leaves, its flat, its offset, its number
    of dimensions, its sizes)."""

    def __init__(self, shapes: list[tuple[int, torch.dtype, torch.Size]], pinned: bool):
        self.shapes = shapes  # (place among the leaves, dtype, shape) of each tensor
        self.pinned = pinned
        dtypes, sizes, spans, self.layout = flat_layout(shapes)
        self.flats = [torch.empty(size, dtype=dtype, pin_memory=pinned) for dtype, size in zip(dtypes, sizes)]
        self.views = [self.flats[group][offset:offset + numel].view(shape)
                      for (group, offset, numel), (_, _, shape) in zip(spans, shapes)]


class CopiesBeforeStep:
    """The host copy of optimizers' state, made by a background save's writing thread before their next step.

    Only ``optimizer.step()`` and ``optimizer.load_state_dict()`` change the tensors of ``optimizer.state`` (a
    resume or another save waits for the writing thread first; the hyperparameters, which a scheduler may
    change, are copied at the save), and the next step comes after a whole forward and backward. So a
    background save hands these copies to its thread, and hooks that torch runs before each ``step()`` and
    ``load_state_dict()`` of those optimizers (``Optimizer.register_step_pre_hook``,
    ``register_load_state_dict_pre_hook``) wait for the copy when it is not done yet — a wait the goodput ledger
    counts as save blocking. CPU tensors only (a GPU copy is queued on the GPU without waiting and costs the
    training thread little), and only for optimizers whose class torch's hooks run for (:func:`can_wait`).
    Not collective.
    """

    def __init__(self) -> None:
        self._done = threading.Event()
        self._done.set()
        self._hooked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # optimizer → its hook's handle
        self.name: str | None = None

    def leave(self, name: str, optimizers: list[torch.optim.Optimizer]) -> None:
        """Training thread: the copies of checkpoint ``name`` for ``optimizers`` are left to its writing thread,
        which calls :meth:`done` (always: also when it fails). Until then their ``step()`` waits."""
        for optimizer in optimizers:
            if optimizer not in self._hooked:
                self._hooked[optimizer] = (optimizer.register_step_pre_hook(self._before_step),
                                           optimizer.register_load_state_dict_pre_hook(self._before_load))
        self.name = name
        self._done.clear()

    def done(self) -> None:
        """Writing thread: the copies are made, or will not be: steps go on."""
        self._done.set()

    def _before_load(self, optimizer: Any, state: Any) -> None:
        self._before_step(optimizer, (), {})

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._done.is_set():
            return
        started = time.perf_counter()
        if not self._done.wait(comm.DEFAULT_TIMEOUT_S):
            raise CheckpointError(
                f"the optimizer's step waited {comm.DEFAULT_TIMEOUT_S:g}s for the writing thread of checkpoint "
                f"{self.name} to copy the optimizer's state; that thread hangs (a stack dump shows where)"
            )
        waited = time.perf_counter() - started
        ledger.within_step("save", waited)
        if ledger.active() is not None:
            ledger.active().event("copy_wait", name=self.name, seconds=waited)


def can_wait(optimizer: Any) -> bool:
    """``optimizer``'s state may be copied by a writing thread (:class:`CopiesBeforeStep`): a torch optimizer
    whose ``step()`` runs its hooks (torch marks the method so) and every parameter it trains (so its state) in
    host memory."""
    return (isinstance(optimizer, torch.optim.Optimizer) and getattr(type(optimizer).step, "hooked", False)
            and hasattr(optimizer, "_optimizer_step_pre_hooks")
            and all(p.device.type == "cpu" for group in optimizer.param_groups for p in group["params"]))


class LiveState:
    """Model and optimizer state in torch's ``get_model_state_dict`` / ``get_optimizer_state_dict``
    layout (in place: no copies; an fsdp model's DTensor shards as they are), read without torch's per-call
    overhead once it was checked to match (the very same tensors, or DTensors over the very same shards, under
    the same keys). Not collective. ``sharded``: what torch gives when it does not match is this rank's shards
    in place (a DCP save's input), not whole tensors on the CPU."""

    def __init__(self) -> None:
        self._models: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._optimizers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # optimizer → matched torch's answer?

    def model(self, module: torch.nn.Module, sharded: bool = False) -> dict[str, Any]:
        live = module.state_dict()
        known = self._models.get(module)  # (module.state_dict()'s keys, {torch's key: its key} or None)
        if known is not None and known[0] == tuple(live):
            if known[1] is None:  # a layout it does not match: torch's answer
                return model_state(module, sharded=sharded)
            return {key: live[source] for key, source in known[1].items()}
        reference = model_layout(module)
        keys = _match_keys(reference, live)
        self._models[module] = (tuple(live), keys)
        return reference if keys is not None else model_state(module, sharded=sharded)

    def optimizer(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool = False) -> dict[str, Any]:
        if optimizer_is_fresh(optimizer):
            return optimizer_state(module, optimizer, sharded=sharded)
        matched = self._optimizers.get(optimizer)
        if matched is None:  # the first time: compared with torch's answer in place
            reference = _torch_optimizer_state(module, optimizer)
            matched = self._optimizers[optimizer] = _same_state(_optimizer_by_name(module, optimizer), reference)
            if matched:
                return reference
        fast = _optimizer_by_name(module, optimizer) if matched else None
        return fast if fast is not None else optimizer_state(module, optimizer, sharded=sharded)


def _torch_optimizer_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    import torch.distributed.checkpoint.state_dict as dsd

    return dsd.get_optimizer_state_dict(module, optimizer)


def _view(tensor: Any) -> tuple[Any, ...] | None:
    """What makes two tensors read the very same values: their memory and its layout; for a DTensor, its shard's,
    and how the shards make the whole (mesh, placements, global shape)."""
    if not isinstance(tensor, torch.Tensor):
        return None
    local = getattr(tensor, "_local_tensor", None)
    if local is not None:
        shard = _view(local)
        return None if shard is None else (
            "dtensor", id(tensor.device_mesh), tuple(str(p) for p in tensor.placements), tuple(tensor.shape), shard)
    return tensor.device, tensor.dtype, tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride())


def _match_keys(reference: dict[str, Any], live: dict[str, Any]) -> dict[str, str] | None:
    """For each key of torch's answer, the key of ``module.state_dict()`` holding the very same tensor
    view (itself when present); ``None`` when one has no match (a DTensor, a copy, another layout)."""
    keys: dict[str, str] = {}
    by_view: dict[Any, list[str]] = {}
    for key, value in live.items():
        by_view.setdefault(_view(value), []).append(key)
    for key, value in reference.items():
        view = _view(value)
        if view is None:
            return None
        if key in live and _view(live[key]) == view:
            keys[key] = key
        elif len(by_view.get(view, [])) == 1:
            keys[key] = by_view[view][0]
        else:
            return None
    return keys


def _optimizer_by_name(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """``optimizer``'s state keyed by parameter name as torch's ``get_optimizer_state_dict`` gives it for
    an unsharded model; ``None`` when a parameter it trains is not one of ``module``'s."""
    names: dict[int, str] = {}
    for name, parameter in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), name)  # a tied parameter goes by its first name, as in torch's answer
    state: dict[str, Any] = {}
    groups = []
    for group in optimizer.param_groups:
        params = []
        for parameter in group["params"]:
            name = names.get(id(parameter))
            if name is None:
                return None
            params.append(name)
            if parameter in optimizer.state:
                state[name] = dict(optimizer.state[parameter])
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
    return {"state": state, "param_groups": groups}


def _same_state(fast: Any, reference: Any) -> bool:
    """The same structure, keys in the same order, the very same tensor views and equal other values."""
    if isinstance(reference, torch.Tensor) or isinstance(fast, torch.Tensor):
        return _view(fast) is not None and _view(fast) == _view(reference)
    if isinstance(reference, dict):
        return (isinstance(fast, dict) and list(fast) == list(reference)
                and all(_same_state(fast[key], reference[key]) for key in reference))
    if isinstance(reference, (list, tuple)):
        return (type(fast) is type(reference) and len(fast) == len(reference)
                and all(_same_state(a, b) for a, b in zip(fast, reference)))
    return type(fast) is type(reference) and fast == reference
