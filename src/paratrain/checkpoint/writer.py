"""Writing the pieces of one checkpoint into its (temporary) directory.

Model weights go to safetensors (no code in the format, readable by any
framework); nested state (optimizer, sampler, scheduler, RNG) to ``torch.save``
files that hold plain data only; FSDP shards to torch.distributed.checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from paratrain.checkpoint.layout import SHARDED_DIR, model_file, state_file
from paratrain.checkpoint.packed import pack
from paratrain.checkpoint.safe_load import check_plain
from paratrain.errors import CheckpointError

_NO_TENSORS = {int, float, bool, str, type(None)}


def tensor_bytes(state: Any) -> int:
    """Bytes of all tensors in a (nested) state, to check free space before writing."""
    if type(state) in _NO_TENSORS:  # most values of an optimizer's state: the ids in its param_groups
        return 0
    if isinstance(state, torch.Tensor):
        local = getattr(state, "_local_tensor", state)  # a DTensor writes only its shard
        return local.numel() * local.element_size()
    if isinstance(state, dict):
        return sum(tensor_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(tensor_bytes(v) for v in state)
    return 0


def check_free_space(directory: Path, needed: int) -> None:
    """Check, before writing, that ``directory``'s disk has room for ``needed`` bytes.

    Raises:
        CheckpointError: the disk clearly cannot hold them.
    """
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise CheckpointError(
            f"not enough disk space for a checkpoint in {directory}: needs about {needed / 2**20:.1f} MiB, "
            f"{free / 2**20:.1f} MiB free; free disk space, lower keep_last, or write checkpoints to a bigger disk"
        )


def safetensors_ready(name: str, state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Contiguous tensors with no shared storage (safetensors refuses tied weights)."""
    ready: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"model {name!r} has a non-tensor entry {key!r} ({type(value).__name__}) in its state_dict; "
                "model weights are stored as safetensors: keep non-tensor state in a separate stateful object"
            )
        # detach() and contiguous() only where they change something: each is a call into torch, per tensor, in
        # the thread that writes while training runs beside it
        tensor = value.detach() if value.requires_grad else value
        tensor = tensor if tensor.is_contiguous() else tensor.contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages and tensor.numel():
            tensor = tensor.clone()  # tied weight: written twice, loaded into both names
        storages.add(storage)
        ready[key] = tensor
    return ready


def write_model(directory: Path, name: str, state: dict[str, Any], checked: bool = False,
                described: ModelDescriptions | None = None) -> dict[str, Any]:
    """``NAME.safetensors`` with prefix-free keys; returns the manifest entry. ``checked``: ``state`` is
    :func:`safetensors_ready`'s answer already (a background save's, made before the ranks agreed to write);
    ``described``: safetensors' descriptions of the tensors kept from the last write of ``name``."""
    from safetensors.torch import save_file

    target = Path(directory) / model_file(name)
    ready = state if checked else safetensors_ready(name, state)
    with disk_errors_named(target):
        if described is not None and described.can_keep:
            described.write(name, ready, target)
        else:
            save_file(ready, str(target), metadata={"format": "pt"})
    return {"kind": "model", "file": model_file(name)}


class ModelDescriptions:
    """safetensors' description of each model's tensors (its ``_flatten_as_ptr``: for each tensor its dtype, shape,
    and the address and length of its bytes, checked for sparse, non-contiguous and shared tensors: ~75 µs of
    Python per tensor), kept from one write of a model to the next while the tensors are the very same memory —
    a background save hands the writer the same host buffers every time, and the writing thread's Python is what
    the training thread beside it waits for (the interpreter lock). The file is then written by safetensors'
    ``serialize_file`` from the kept description; the bytes are read from the tensors as they are at the write.

    Only with a safetensors whose description points at the tensors' memory (``safetensors.TensorSpec``, 0.7+);
    another one writes with ``save_file`` every time."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[tuple[Any, ...], dict[str, Any], list[Any]]] = {}
        try:
            from safetensors import TensorSpec, serialize_file  # noqa: F401
            from safetensors.torch import _flatten_as_ptr  # noqa: F401
        except ImportError:
            self.can_keep = False
        else:
            self.can_keep = True

    def write(self, name: str, tensors: dict[str, torch.Tensor], target: Path) -> None:
        from safetensors import serialize_file
        from safetensors.torch import _flatten_as_ptr

        # The memory each tensor reads: the kept description holds (and so keeps alive) the tensors it was made
        # from, so an equal key is the same memory, never a new tensor at a freed address
        key = tuple((k, t.data_ptr(), t.dtype, t.shape) for k, t in tensors.items())
        kept = self._kept.get(name)
        if kept is None or kept[0] != key:
            alive: list[Any] = []
            kept = self._kept[name] = (key, _flatten_as_ptr(tensors, alive), alive)
        serialize_file(kept[1], str(target), metadata={"format": "pt"})


def write_state(directory: Path, name: str, kind: str, state: Any, checked: bool = False) -> dict[str, Any]:
    """``NAME.pt`` (plain data only, checked first unless ``checked``: a background save checked it before
    the ranks agreed to write), its tensors packed (:mod:`.packed`); returns the manifest entry.

    Raises:
        CheckpointError: the state holds an object that would need unpickling.
    """
    if not checked:
        check_plain(state, name)
    target = Path(directory) / state_file(name)
    with disk_errors_named(target):
        torch.save(pack(state), target)  # its tensors as a few flat ones: most of torch.save's cost is per tensor
    return {"kind": kind, "file": state_file(name)}


#: Below this many free bytes a failed write is taken for a full disk.
FULL_DISK_BYTES = 1 << 20


@contextlib.contextmanager
def disk_errors_named(target: Path) -> Iterator[None]:
    """A write that failed because the disk is full raises ``OSError(ENOSPC)`` naming ``target``.

    torch.save and safetensors report a full disk in their own words ("unexpected pos 64 vs 0",
    "file write failed") as a RuntimeError; the free space left says what happened.
    """
    try:
        yield
    except OSError:
        raise
    except Exception as exc:
        try:
            free = shutil.disk_usage(target.parent).free
        except OSError:
            raise exc from None
        if free < FULL_DISK_BYTES:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target)) from exc
        raise


def write_sharded(directory: Path, states: dict[str, Any]) -> None:
    """Every rank writes its shards of ``states`` with DCP. Collective.

    DCP gathers the save plans, writes one file per rank, and has the coordinator
    write ``.metadata``; a failure on any rank is raised on all ranks.
    """
    import torch.distributed.checkpoint as dcp

    target = Path(directory) / SHARDED_DIR
    target.mkdir(parents=True, exist_ok=True)
    dcp.save(states, storage_writer=dcp.FileSystemWriter(str(target), sync_files=True))
