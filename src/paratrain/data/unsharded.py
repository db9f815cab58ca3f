"""Warn once when a multi-rank job trains on a DataLoader that every rank reads whole.

``paratrain check``'s runtime twin for the two-machine MNIST tutorial's pitfall (a
DistributedSampler made but never passed to the DataLoader). While a multi-process :class:`~paratrain.Runtime` is
open, ``DataLoader.__iter__`` notes each iteration of a loader whose sampler does not
shard (no DistributedSampler, no paratrain sampler, no ``num_replicas``), with the
variable name and line that iterate it. ``rt.step`` then asks :func:`check_step`: if such
an iteration is under way, it is a *training* loop on unsharded data — every rank
trains on the whole dataset — and rank 0 warns once per loader. Evaluating every sample
on every rank, which some scripts do on purpose, takes no optimizer step and is not
reported. The cost is a type check per epoch and a look at a weak set per step.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from typing import Any

from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from paratrain import comm
from paratrain.data.resumable import ResumableSampler


class UnshardedLoaderWarning(UserWarning):
    """A multi-rank job trains on a DataLoader without a distributed sampler."""


_watchers = 0
_original_iter = None
_running: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # live iterator → (loader ref, name, where)
_warned: weakref.WeakSet = weakref.WeakSet()


def watch() -> None:
    """Start noting unsharded iterations in this process (nested calls are counted)."""
    global _watchers, _original_iter
    _watchers += 1
    if _original_iter is None:
        _original_iter = DataLoader.__iter__
        DataLoader.__iter__ = _noting_iter


def unwatch() -> None:
    """Undo one :func:`watch`; the last one restores ``DataLoader.__iter__``."""
    global _watchers, _original_iter
    _watchers = max(0, _watchers - 1)
    if _watchers == 0 and _original_iter is not None:
        DataLoader.__iter__ = _original_iter
        _original_iter = None
        _running.clear()


def check_step() -> None:
    """Called at each optimizer step: warn (rank 0, once per loader) about unsharded training data."""
    for iterator, (loader_ref, name, where) in list(_running.items()):
        loader = loader_ref()
        if loader is None or loader in _warned or getattr(iterator, "_num_yielded", 0) == 0:
            continue
        _warned.add(loader)
        if comm.rank() == 0:
            warnings.warn(_message(loader, name, where), UnshardedLoaderWarning, stacklevel=3)


def is_sharded(loader: DataLoader) -> bool:
    """Does each rank read only its part? (An IterableDataset shards itself, or cannot be told.)"""
    if isinstance(loader.dataset, IterableDataset):
        return True
    samplers = (loader.sampler, getattr(loader.batch_sampler, "sampler", None), loader.batch_sampler)
    return any(
        isinstance(s, (DistributedSampler, ResumableSampler)) or hasattr(s, "num_replicas")
        for s in samplers if s is not None
    )


def _noting_iter(self: DataLoader):
    iterator = _original_iter(self)
    if self not in _warned and not is_sharded(self):
        caller = sys._getframe(1)
        name = next((n for n, v in caller.f_locals.items() if v is self), None)
        _running[iterator] = (weakref.ref(self), name, f"{caller.f_code.co_filename}:{caller.f_lineno}")
    return iterator


def _message(loader: Any, name: str | None, where: str) -> str:
    try:
        size = f" ({len(loader.dataset)} samples)"
    except TypeError:
        size = ""
    label = f"DataLoader `{name}`" if name else "a DataLoader"
    world = comm.world_size()
    return (
        f"{label} over {type(loader.dataset).__name__}{size}, iterated at {where}, has no distributed sampler: "
        f"each of the {world} ranks trains on the whole dataset ({world}x the work, no speed-up); pass "
        "sampler=DistributedSampler(dataset) (and call set_epoch), or use rt.loader(dataset, batch_size, shuffle=True)"
    )
