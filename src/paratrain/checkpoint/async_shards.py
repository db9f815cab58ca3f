"""Sharded checkpoints written in the background with torch.distributed.checkpoint.

The training thread copies this rank's shards to host memory (:meth:`HostCopyOfShards.stage`, the only part of
the shards that blocks training) and hands the copy to the rank's writing thread (:mod:`.background`), which writes
it with DCP's ``save`` once the ranks agreed on the save. DCP's collectives (the save plan, the coordinator's
``.metadata``, the agreement on the outcome) run on the process group they are given; on the group training uses
they could interleave with training's own collectives in another order on each rank (a deadlock, or tensors
summed into the wrong call); so the writes get a gloo group of their own, made once by every rank together.

The host copy is kept between saves (:class:`HostCopyOfShards`): DCP's own stager allocates a new one at every
save, which on 2 CPU ranks took ~30 ms of the ~35 ms a background save blocked for (deep copies of every DTensor);
copying into the kept one takes ~1 ms for 6 MB. DCP's save plans are kept with it (its planner's plan caching, under
a name of this copy's own): the plans of one model's shards do not change between saves, and planning took ~27 ms of
the ~160 ms of CPU one rank's write of text-cls's fsdp state cost.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Collection
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from paratrain import comm
from paratrain.checkpoint.layout import SHARDED_DIR
from paratrain.checkpoint.snapshot import copy_to_host


def writing_group() -> Any:
    """A new gloo group of every rank, for the collectives of background writes (``None`` without a
    process group). Collective: every rank makes it together, at the same point of the run.

    Its timeout is ``PARATRAIN_TIMEOUT`` (600 s by default): a writing thread whose peer died gives up then.
    """
    if not comm.is_initialized():
        return None
    import torch.distributed as dist

    return dist.new_group(backend="gloo", timeout=timedelta(seconds=comm.DEFAULT_TIMEOUT_S))


class HostCopyOfShards:
    """A host copy of a rank's shards kept from one save to the next (DCP's own stager allocates a new one at
    every save): a save copies into it, made again only when the states' layout (keys, shapes, dtypes,
    placements) changed (an optimizer's first state). Only one write reads it at a time: a save waits for the
    previous write before it copies.

    The tensors of an optimizer's ``state`` may be copied later, by the writing thread (:meth:`copy_the_rest`),
    while training runs the next forward and backward: only the optimizer's next step changes them, and that
    step waits for the copy (:class:`~paratrain.checkpoint.snapshot.CopiesBeforeStep`)."""

    def __init__(self) -> None:
        self._copy: dict[str, Any] | None = None
        self._layout: Any = None
        self._later: list[tuple[str, Any]] = []  # (an entry's key, its live optimizer state) left to copy_the_rest
        self._in_flight: list[Any] = []  # CUDA events after GPU copies not yet waited for (:meth:`ready`)
        self.plans_key = f"paratrain-host-copy-{next(_copies)}"  # DCP's cached save plans for these shards

    def planner(self) -> Any:
        """A DCP save planner that keeps its plans from one save of these shards to the next (torch's plan caching:
        a rank whose local plan did not change sends none; the coordinator reuses the global plan and merges the
        plans that changed), under :attr:`plans_key`, apart from any other DCP save of the process."""
        from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

        key = self.plans_key

        class PlansKept(DefaultSavePlanner):
            _cached_plans_key = property(lambda self: key, lambda self, value: None)  # torch sets its class name

        return PlansKept(enable_plan_caching=True)

    def stage(self, state_dict: dict[str, Any], later: Collection[str] = ()) -> dict[str, Any]:
        """``state_dict`` copied to host memory, into the kept copy; but for the entries named in ``later``
        (optimizers'), whose ``state`` is copied only by :meth:`copy_the_rest` (their hyperparameters now: a
        scheduler may change them before the next step). Training thread."""
        from torch.distributed._state_dict_utils import _create_cpu_state_dict

        layout = _layout(state_dict)
        if self._copy is None or layout != self._layout:
            on_cuda = "'cuda'" in repr(layout)  # pinned host memory (cudaHostRegister) needs CUDA
            self._copy = _create_cpu_state_dict(state_dict, pin_memory=on_cuda)
            self._layout = layout
        self._later = []
        staged = {}
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (kept tensor, live tensor), copied together at the end
        for key, value in state_dict.items():
            if key in later and isinstance(value, dict) and "state" in value:
                staged[key] = {name: None if name == "state" else _copied(item, self._copy[key][name], pairs)
                               for name, item in value.items()}  # "state" in its place, filled by copy_the_rest
                self._later.append((key, value["state"]))
            else:
                staged[key] = _copied(value, self._copy[key], pairs)
        self._copy_pairs(pairs)
        return staged

    def copy_the_rest(self, staged: dict[str, Any]) -> None:
        """The optimizers' ``state`` that :meth:`stage` left, copied into the kept copy and put into ``staged``
        (its answer); on return every copy of this save is in host memory (:meth:`ready`). Writing thread, before
        those optimizers' next step."""
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        for key, state in self._later:
            staged[key]["state"] = _copied(state, self._copy[key]["state"], pairs)
        self._later = []
        self._copy_pairs(pairs)
        self.ready()

    def _copy_pairs(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Every live tensor into its kept copy in one call into torch (it was one per tensor: torch's
        ``_copy_state_dict``, ~15 µs of Python each): :func:`~paratrain.checkpoint.snapshot.copy_to_host`, whose
        event (GPU copies) :meth:`ready` waits for."""
        event = copy_to_host(pairs)
        if event is not None:
            self._in_flight.append(event)

    def ready(self) -> None:
        """Wait until the GPU copies made so far are in host memory (no-op without any). Any thread."""
        while self._in_flight:
            self._in_flight.pop(0).synchronize()


_copies = itertools.count()


def _copied(value: Any, into: Any, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """``value`` with ``into``'s tensors in place of its own (the same structure: :func:`_layout` equal), each pair
    of local tensors (``into``'s, ``value``'s: a DTensor's shard on this rank) added to ``pairs`` to be copied;
    ``value``'s other values deep-copied, as torch's own stager does. A ShardedTensor is copied at once by torch."""
    if isinstance(value, torch.Tensor):
        if type(value) is torch.Tensor or getattr(value, "_local_tensor", None) is not None:  # plain, or a DTensor
            pairs.append((getattr(into, "_local_tensor", into), getattr(value, "_local_tensor", value)))
            return into
        from torch.distributed._state_dict_utils import _copy_state_dict

        return _copy_state_dict({"": value}, {"": into}, type_check=False)[""]
    if isinstance(value, dict):
        return {key: _copied(item, into[key], pairs) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_copied(item, kept, pairs) for item, kept in zip(value, into)]
        return items if isinstance(value, list) else tuple(items)
    if value is None or isinstance(value, (int, float, str, bytes)):
        return value
    return copy.deepcopy(value)


def _layout(value: Any) -> Any:
    """What a host copy made for ``value`` fits: its containers' keys and its tensors' kinds, shapes and dtypes."""
    if isinstance(value, torch.Tensor):
        # a DTensor's placements as they are (Shard(0) == Shard(0)): their text took a third of this walk
        return type(value).__name__, tuple(value.shape), value.dtype, value.device.type, getattr(value, "placements", None)
    if isinstance(value, dict):
        return tuple((key, _layout(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(_layout(item) for item in value)
    return None


def write_shards(directory: Path, staged: dict[str, Any], group: Any, host_copy: HostCopyOfShards,
                 written_here: Callable[[], None] = lambda: None) -> None:
    """Write this rank's shards, as :meth:`HostCopyOfShards.stage` copied them, with DCP into ``directory``'s
    shards folder (files fsynced). Collective on ``group``: every rank writes the same checkpoint's shards
    together, from its writing thread, and no other write runs on ``group`` meanwhile. ``written_here()`` runs
    once this rank's own files are written, before DCP's last collective waits for the other ranks'.

    Raises:
        CheckpointException: DCP's, on every rank when the write failed on any.
    """
    import torch.distributed.checkpoint as dcp

    target = Path(directory) / SHARDED_DIR
    target.mkdir(parents=True, exist_ok=True)
    dcp.save(staged, storage_writer=_writer_that_says_when_done(str(target), written_here),
             planner=host_copy.planner(), process_group=group)


def _writer_that_says_when_done(path: str, written_here: Callable[[], None]) -> Any:
    """DCP's file writer (files fsynced), calling ``written_here()`` once this rank's data files are written (the
    class is made at the first save: DCP is imported only when it is used)."""
    global _WriterThatSaysWhenDone
    if _WriterThatSaysWhenDone is None:
        import torch.distributed.checkpoint as dcp

        class WriterThatSaysWhenDone(dcp.FileSystemWriter):
            def __init__(self, path: str, written_here: Callable[[], None]):
                super().__init__(path, sync_files=True)
                self.written_here = written_here

            def write_data(self, plan: Any, planner: Any) -> Any:
                done = super().write_data(plan, planner)
                done.wait()  # FileSystemWriter writes before it returns; the wait makes sure of it
                self.written_here()
                return done

        _WriterThatSaysWhenDone = WriterThatSaysWhenDone
    return _WriterThatSaysWhenDone(path, written_here)


_WriterThatSaysWhenDone: Any = None
