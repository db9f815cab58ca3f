"""torch.distributed.checkpoint's file reader and load planner, made safe (see :mod:`.safe_load`).

torch 2.13 reads DCP ``.metadata`` with ``pickle.load`` and non-tensor entries with
``torch.load(weights_only=False)``; these subclasses replace exactly those two reads.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from paratrain.checkpoint.safe_load import read_dcp_metadata, refusal


class SafeFileSystemReader(FileSystemReader):
    """DCP's file reader, with metadata read by the restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        # Same as FileSystemReader.read_metadata (torch 2.13) but without pickle.load.
        metadata = read_dcp_metadata(self.path)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's load planner, with non-tensor entries read by ``torch.load(weights_only=True)``."""

    def load_bytes(self, read_item: Any, value: Any) -> None:
        # Parse with the weights-only unpickler first: it refuses any global that is
        # not plain data, so the base class's unrestricted torch.load below then
        # only ever sees bytes already proven harmless.
        try:
            torch.load(value, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise refusal(f"sharded entry {read_item.dest_index.fqn!r}", str(exc).splitlines()[0][:200]) from exc
        value.seek(0)
        super().load_bytes(read_item, value)
