"""Checkpoint files hold plain data only: what a save may write, and every read without ever
unpickling arbitrary objects.

A pickle can name any importable callable and have it called while loading
(``__reduce__``), so a checkpoint file from somewhere else could run code. Every
read here is restricted to plain data:

* ``.pt`` files: ``torch.load(weights_only=True)`` — tensors, numbers, strings,
  lists, tuples, dicts; anything else is refused with :class:`CheckpointError`.
* ``.safetensors``: a JSON header and raw bytes, no code by design.
* torch.distributed.checkpoint (DCP): its ``.metadata`` file is read with
  ``pickle.load`` and its non-tensor entries with ``torch.load(weights_only=False)``
  (torch 2.13, ``FileSystemReader.read_metadata`` and ``DefaultLoadPlanner.load_bytes``).
  :func:`read_dcp_metadata` and :mod:`paratrain.checkpoint.dcp_readers` replace
  both with readers that accept only the classes DCP itself writes.

torch.distributed.checkpoint is imported only when a sharded checkpoint is read
(importing it takes about a second).

Saving checks the other side (:func:`check_plain`): everything saved with ``torch.save`` is
read back with ``weights_only=True``, which accepts tensors, numbers, strings, bytes, ``None``,
lists, tuples, sets, dicts, torch dtypes, devices and sizes. Checking this when *saving* turns
"my run cannot resume" weeks later into an error now that names the object and the key.
"""

from __future__ import annotations

import collections
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from paratrain.checkpoint.packed import unpack
from paratrain.errors import CheckpointError

_UNSUPPORTED_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")
_FIX_TRUST = (
    "paratrain loads only tensors, numbers, strings, lists and dicts, because unpickling other "
    "objects can run arbitrary code; if you made this file and trust it, load it with "
    "torch.load(path, weights_only=False) and save its plain state_dict() instead"
)


def refusal(path: Path | str, detail: str) -> CheckpointError:
    """The error for a file that holds a pickled object paratrain will not load."""
    return CheckpointError(f"{path} holds a pickled Python object ({detail}) and was not loaded: {_FIX_TRUST}")


def load_pt(path: Path | str) -> Any:
    """``torch.load(path, weights_only=True)`` on CPU, a packed state unpacked (:mod:`.packed`), with errors that
    say what to do.

    Raises:
        CheckpointError: the file holds a pickled object other than plain data
            (nothing from it is executed), or is not a torch.save file.
    """
    try:
        return unpack(torch.load(path, map_location="cpu", weights_only=True))
    except pickle.UnpicklingError as exc:
        match = _UNSUPPORTED_GLOBAL.search(str(exc))
        detail = f"it refers to {match.group(1)}" if match else str(exc).splitlines()[0][:200]
        raise refusal(path, detail) from exc
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError) as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise CheckpointError(f"{path} is not a readable torch.save file ({first}); it is damaged or of another format") from exc


def load_safetensors(path: Path | str) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file, on CPU.

    Raises:
        CheckpointError: the file is not a valid safetensors file.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc}); it is damaged or of another format") from exc


# ---- torch.distributed.checkpoint ---------------------------------------------------------

_DCP_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_ALLOWED_GLOBALS = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP ``Metadata``: only DCP's own dataclasses, torch sizes, dtypes and layouts."""

    def find_class(self, module: str, name: str) -> Any:
        import torch.distributed.checkpoint.metadata as dcp_metadata

        allowed = (module, name) in _ALLOWED_GLOBALS
        allowed = allowed or (module == _DCP_METADATA_MODULE and isinstance(getattr(dcp_metadata, name, None), type))
        allowed = allowed or (module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.memory_format)))
        if not allowed:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of DCP metadata")
        return super().find_class(module, name)


def read_dcp_metadata(directory: Path | str) -> Any:
    """The ``.metadata`` of a DCP directory, read with :class:`_MetadataUnpickler`.

    Raises:
        CheckpointError: missing, damaged, or referring to other Python objects.
    """
    from torch.distributed.checkpoint.metadata import Metadata

    path = Path(directory) / ".metadata"
    try:
        with open(path, "rb") as handle:
            metadata = _MetadataUnpickler(handle).load()
    except pickle.UnpicklingError as exc:
        raise refusal(path, str(exc)) from exc
    except (OSError, EOFError, AttributeError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path} is not readable DCP metadata ({exc}); the sharded checkpoint is damaged") from exc
    if not isinstance(metadata, Metadata):
        raise CheckpointError(f"{path} is not DCP metadata (found {type(metadata).__name__})")
    return metadata


# Exact types: subclasses such as numpy.float64 (a float) pickle as their own class.
_LEAVES = {bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size}
_CONTAINERS = (dict, collections.OrderedDict, list, tuple, set)


def first_non_plain(value: Any, where: str = "") -> tuple[str, str] | None:
    """``(key path, type name)`` of the first value ``torch.load(weights_only=True)`` would refuse."""
    kind = type(value)
    if kind in _LEAVES or isinstance(value, torch.Tensor):
        return None
    if kind not in _CONTAINERS:
        return where or "<top>", f"{kind.__module__}.{kind.__qualname__}"
    # The key path is spelled only on the way back from a refused value: spelling it for every value
    # checked cost more than the check, at every save
    if isinstance(value, dict):
        for key, item in value.items():
            in_key = first_non_plain(key, "")
            found = in_key or first_non_plain(item, "")
            if found:
                return _below(where, f"[key {key!r}]" if in_key else f"[{key!r}]", found)
        return None
    for index, item in enumerate(value):
        found = first_non_plain(item, "")
        if found:
            return _below(where, f"[{index}]", found)
    return None


def _below(where: str, step: str, found: tuple[str, str]) -> tuple[str, str]:
    """``found``, refused below ``step`` of ``where``: its key path from the top."""
    inner, type_name = found
    return f"{where}{step}{'' if inner == '<top>' else inner}", type_name


def check_plain(value: Any, owner: str) -> None:
    """Refuse state that could not be loaded back without unpickling objects.

    Raises:
        CheckpointError: names the object, the key and the type to convert.
    """
    found = first_non_plain(value)
    if found:
        where, type_name = found
        raise CheckpointError(
            f"{owner}.state_dict() holds a {type_name} at {where}; checkpoints store only tensors, numbers, "
            "strings, lists and dicts (they are loaded without unpickling objects): convert it in state_dict() "
            "(e.g. int(x), x.tolist(), torch.as_tensor(x))"
        )
