"""Reading the pieces of one checkpoint: model weights (one file or DCP shards), states, RNG.

Nothing here unpickles arbitrary objects (see :mod:`paratrain.checkpoint.safe_load`).
A sharded (DCP) checkpoint reads at any world size, including one process without
a process group: DCP maps saved chunks onto whatever layout the target has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from paratrain.checkpoint.keys import strip_wrapper_prefixes
from paratrain.checkpoint.layout import RNG_FILE, SHARDED_DIR
from paratrain.checkpoint.manifest import Manifest
from paratrain.checkpoint.safe_load import load_pt, load_safetensors, read_dcp_metadata
from paratrain.errors import CheckpointError

#: Keys under which foreign ``.pt`` files commonly nest the model weights.
_NESTED_WEIGHT_KEYS = ("model", "state_dict", "model_state_dict", "module", "net")


def model_names(manifest: Manifest) -> list[str]:
    return [name for name, entry in manifest.objects.items() if entry["kind"] == "model"]


def pick_model(manifest: Manifest, name: str | None, where: Path) -> str:
    """The model object to read: ``name``, or the only one.

    Raises:
        CheckpointError: no such model, or several and none named.
    """
    names = model_names(manifest)
    if name is not None:
        if name not in names:
            raise CheckpointError(f"{where} has no model {name!r}; it has: {', '.join(names) or 'no model'}")
        return name
    if len(names) != 1:
        raise CheckpointError(f"{where} has {len(names)} models ({', '.join(names)}); name the one to read")
    return names[0]


def sharded_metadata(directory: Path) -> Any:
    return read_dcp_metadata(Path(directory) / SHARDED_DIR)


def sharded_shapes(metadata: Any, key: str) -> dict[str, tuple[int, ...]]:
    """Saved tensor key → global shape of object ``key`` in DCP metadata."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    found: dict[str, tuple[int, ...]] = {}
    for flat, item in metadata.state_dict_metadata.items():
        path = (metadata.planner_data or {}).get(flat, tuple(flat.split(".", 1)))
        if len(path) == 2 and path[0] == key and isinstance(item, TensorStorageMetadata):
            found[str(path[1])] = tuple(item.size)
    return found


def load_sharded(directory: Path, targets: dict[str, Any], no_dist: bool = False) -> None:
    """Fill ``targets`` (object key → state dict of tensors/DTensors) from DCP shards.

    Collective unless ``no_dist`` (or no process group): all ranks call it together.
    """
    import warnings

    import torch.distributed.checkpoint as dcp

    from paratrain.checkpoint.dcp_readers import SafeFileSystemReader, SafeLoadPlanner

    with warnings.catch_warnings():
        # One process reading everything is what we mean here; DCP warns about it.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(
            targets,
            storage_reader=SafeFileSystemReader(str(Path(directory) / SHARDED_DIR)),
            planner=SafeLoadPlanner(),
            no_dist=no_dist,
        )


def read_full_model(directory: Path, manifest: Manifest, name: str) -> dict[str, torch.Tensor]:
    """Whole tensors of model ``name`` on CPU, prefix-free, from either layout. Not collective."""
    entry = manifest.objects[name]
    if "file" in entry:
        return strip_wrapper_prefixes(load_safetensors(Path(directory) / entry["file"]))
    metadata = sharded_metadata(directory)
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    target: dict[str, torch.Tensor] = {}
    for flat, item in metadata.state_dict_metadata.items():
        path = (metadata.planner_data or {}).get(flat, tuple(flat.split(".", 1)))
        if len(path) == 2 and path[0] == name and isinstance(item, TensorStorageMetadata):
            target[str(path[1])] = torch.empty(tuple(item.size), dtype=item.properties.dtype)
    load_sharded(directory, {name: target}, no_dist=True)
    return target


def read_weights_file(path: Path) -> dict[str, torch.Tensor]:
    """Model weights from a lone file: safetensors, or a ``.pt``/``.bin`` state dict
    (top level or under ``model``/``state_dict``/…), with wrapper prefixes removed.

    Raises:
        CheckpointError: unreadable, holds pickled objects, or holds no tensors.
    """
    path = Path(path)
    with open(path, "rb") as handle:
        head = handle.read(8)
    is_torch = head[:2] == b"PK" or head[:1] == b"\x80"  # zip (torch.save) or legacy pickle
    state = load_pt(path) if is_torch else load_safetensors(path)
    if isinstance(state, dict) and not _all_tensors(state):
        nested = [state[k] for k in _NESTED_WEIGHT_KEYS if isinstance(state.get(k), dict) and _all_tensors(state[k])]
        if nested:
            state = nested[0]
    if not isinstance(state, dict) or not state or not _all_tensors(state):
        raise CheckpointError(
            f"{path} holds no model state dict (a dict of tensor names to tensors, at the top level or under "
            f"one of {', '.join(_NESTED_WEIGHT_KEYS)}); pass a weights file or a paratrain checkpoint directory"
        )
    return strip_wrapper_prefixes(state)


def _all_tensors(state: dict[Any, Any]) -> bool:
    return bool(state) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())


def read_rng(directory: Path, manifest: Manifest) -> list[dict[str, Any]]:
    """Every saved rank's generator states (index = rank); empty if none were saved."""
    if RNG_FILE not in manifest.files:
        return []
    return load_pt(Path(directory) / RNG_FILE)["ranks"]
