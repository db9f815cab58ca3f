"""What is in a checkpoint (``paratrain ckpt inspect``), without loading the weights.

Shapes and dtypes come from the safetensors header or the DCP metadata; every
file is checked against its checksum and reported, so a damaged checkpoint can be
inspected too (it is described, with the damage, rather than refused).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from paratrain.checkpoint.catalog import resolve
from paratrain.checkpoint.layout import COMPLETE
from paratrain.checkpoint.manifest import file_problems, read_manifest
from paratrain.checkpoint.reader import read_weights_file, sharded_metadata
from paratrain.errors import CheckpointError

# safetensors' dtype codes → torch dtypes (https://github.com/huggingface/safetensors, "dtype" in the header).
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}


def _tensor(obj: str, name: str, shape: tuple[int, ...], dtype: torch.dtype | str) -> dict[str, Any]:
    """One tensor's row; ``dtype`` is a safetensors code when torch has no such dtype (size unknown: 0)."""
    count = 1
    for size in shape:
        count *= int(size)
    known = isinstance(dtype, torch.dtype)
    return {
        "object": obj,
        "name": name,
        "shape": list(shape),
        "dtype": str(dtype).removeprefix("torch.") if known else str(dtype).lower(),
        "bytes": count * dtype.itemsize if known else 0,
    }


def _file_tensors(path: Path, obj: str) -> list[dict[str, Any]]:
    from safetensors import safe_open

    tensors = []
    with safe_open(str(path), framework="pt") as handle:
        for key in handle.keys():
            view = handle.get_slice(key)
            code = view.get_dtype()
            tensors.append(_tensor(obj, key, tuple(view.get_shape()), _SAFETENSORS_DTYPES.get(code, code)))
    return tensors


def _sharded_tensors(directory: Path, objects: set[str]) -> list[dict[str, Any]]:
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = sharded_metadata(directory)
    tensors = []
    for flat, item in metadata.state_dict_metadata.items():
        path = (metadata.planner_data or {}).get(flat, tuple(flat.split(".", 1)))
        if path[0] in objects and isinstance(item, TensorStorageMetadata):
            name = ".".join(str(p) for p in path[1:])
            tensors.append(_tensor(str(path[0]), name, tuple(item.size), item.properties.dtype))
    return tensors


def describe(path: str | Path) -> dict[str, Any]:
    """A JSON-ready description of the checkpoint (or weights file) at ``path``.

    Raises:
        CheckpointError: not found, not a checkpoint, or unfinished (no marker).
    """
    source = resolve(path)
    if source.is_file():
        state = read_weights_file(source)
        return {
            "path": str(source),
            "kind": "weights file",
            "tensors": [_tensor("model", k, tuple(v.shape), v.dtype) for k, v in state.items()],
            "files": [{"file": source.name, "bytes": source.stat().st_size, "status": "no checksum (not a checkpoint)"}],
        }
    if not (source / COMPLETE).exists():
        raise CheckpointError(f"{source} has no {COMPLETE} marker: its save never finished, so it holds nothing to inspect")
    manifest = read_manifest(source)
    problems = file_problems(source, manifest)
    files = [
        {"file": name, "bytes": info["bytes"], "status": problems.get(name, "ok")}
        for name, info in sorted(manifest.files.items())
    ]
    tensors: list[dict[str, Any]] = []
    models = {name for name, entry in manifest.objects.items() if entry["kind"] == "model"}
    for name in sorted(models):
        entry = manifest.objects[name]
        if "file" in entry and entry["file"] not in problems:
            tensors += _file_tensors(source / entry["file"], name)
    if manifest.sharded and not any(f.startswith("sharded/.metadata") for f in problems):
        tensors += _sharded_tensors(source, models)
    info = dataclasses.asdict(manifest)
    info.pop("files")
    return {
        "path": str(source),
        "kind": "checkpoint",
        **info,
        "verified": not problems,
        "files": files,
        "tensors": tensors,
    }
