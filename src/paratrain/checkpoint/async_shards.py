"""Sharded checkpoints written in the background, with torch.distributed.checkpoint's ``async_save``.

``async_save`` copies this rank's shards to host memory in the calling thread (the only part that
blocks training) and writes them in a thread of DCP's own; that thread's collectives (the save plan,
the coordinator's ``.metadata``, the agreement on the outcome) run on the process group it is given.
On the group training uses they could interleave with training's own collectives in another order on
each rank (a deadlock, or tensors summed into the wrong call); so the writes get a gloo group of their
own, made once by every rank together (``async_save`` also insists on a CPU backend: "A CPU backend
must be enabled for async save").

The host copy is kept between saves (:class:`HostCopyOfShards`): DCP's own stager allocates a new one at every
save, which on 2 CPU ranks took ~30 ms of the ~35 ms a background save blocked for (deep copies of every DTensor);
copying into the kept one takes ~1 ms for 6 MB. DCP's save plans are kept with it (its planner's plan caching, under
a name of this copy's own): the plans of one model's shards do not change between saves, and planning took ~27 ms of
the ~160 ms of CPU one rank's write of text-cls's fsdp state cost.
"""

from __future__ import annotations

import itertools
from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from paratrain import comm
from paratrain.checkpoint.layout import SHARDED_DIR


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
    """A stager for DCP's ``async_save`` (its ``AsyncStager`` protocol; torch's ``BlockingAsyncStager`` with its
    cache, without importing DCP before a save needs it) that keeps its host copy of a rank's shards from one save
    to the next: a save copies into it, made again only when the states' layout (keys, shapes, dtypes, placements)
    changed (an optimizer's first state). The copy is complete when ``stage`` returns. Only one write reads it at
    a time: a save waits for the previous write before it copies."""

    should_synchronize_after_execute = False  # the copy is made in stage(), before training goes on

    def __init__(self) -> None:
        self._copy: dict[str, Any] | None = None
        self._layout: Any = None
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

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        layout = _layout(state_dict)
        if self._copy is None or layout != self._layout:
            on_cuda = "'cuda'" in repr(layout)  # pinned host memory (cudaHostRegister) needs CUDA
            self._copy = _create_cpu_state_dict(state_dict, pin_memory=on_cuda)
            self._layout = layout
        return _copy_state_dict(state_dict, self._copy, type_check=False)  # as torch's own stager

    def synchronize_staging(self) -> None:
        """Nothing: the copy is complete when :meth:`stage` returns."""

    def close(self) -> None:
        """Nothing: the copy is kept for the next save."""


_copies = itertools.count()


def _layout(value: Any) -> Any:
    """What a host copy made for ``value`` fits: its containers' keys and its tensors' kinds, shapes and dtypes."""
    if isinstance(value, torch.Tensor):
        return type(value).__name__, tuple(value.shape), value.dtype, value.device.type, str(getattr(value, "placements", ""))
    if isinstance(value, dict):
        return tuple((key, _layout(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(_layout(item) for item in value)
    return None


def start_writing_shards(directory: Path, states: dict[str, Any], group: Any,
                         host_copy: HostCopyOfShards | None = None) -> Future:
    """Copy this rank's shards of ``states`` to host memory, then write them with DCP in a thread;
    the returned Future completes when they are written (its ``result()`` raises what the write raised,
    DCP's own agreement: a failure on any rank fails every rank's Future). Collective on ``group``:
    every rank starts it for the same checkpoint, and no other write runs on ``group`` until it completes.
    """
    import torch.distributed.checkpoint as dcp

    target = Path(directory) / SHARDED_DIR
    target.mkdir(parents=True, exist_ok=True)
    return dcp.async_save(states, storage_writer=dcp.FileSystemWriter(str(target), sync_files=True),
                          planner=host_copy.planner() if host_copy is not None else None,
                          process_group=group, async_stager=host_copy)
