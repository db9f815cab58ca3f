"""Sharded checkpoints written in the background, with torch.distributed.checkpoint's ``async_save``.

``async_save`` copies this rank's shards to host memory in the calling thread (the only part that
blocks training) and writes them in a thread of DCP's own; that thread's collectives (the save plan,
the coordinator's ``.metadata``, the agreement on the outcome) run on the process group it is given.
On the group training uses they could interleave with training's own collectives in another order on
each rank (a deadlock, or tensors summed into the wrong call); so the writes get a gloo group of their
own, made once by every rank together (``async_save`` also insists on a CPU backend: "A CPU backend
must be enabled for async save").
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import Any

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


def start_writing_shards(directory: Path, states: dict[str, Any], group: Any) -> Future:
    """Copy this rank's shards of ``states`` to host memory, then write them with DCP in a thread;
    the returned Future completes when they are written (its ``result()`` raises what the write raised,
    DCP's own agreement: a failure on any rank fails every rank's Future). Collective on ``group``:
    every rank starts it for the same checkpoint, and no other write runs on ``group`` until it completes.
    """
    import torch.distributed.checkpoint as dcp

    target = Path(directory) / SHARDED_DIR
    target.mkdir(parents=True, exist_ok=True)
    return dcp.async_save(states, storage_writer=dcp.FileSystemWriter(str(target), sync_files=True),
                          process_group=group)
