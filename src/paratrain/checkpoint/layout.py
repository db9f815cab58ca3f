"""Where things are on disk.

::

    runs/exp/checkpoints/
        latest                      "step-000120" — the newest checkpoint (atomic pointer)
        step-000060/
        step-000120/
            model.safetensors       weights, prefix-free keys (one file per model)
            optimizer.pt            nested state: torch.save, read with weights_only=True
            loader.pt, ...          every other stateful object
            rng.pt                  Python/NumPy/torch/CUDA generators of every rank
            sharded/                fsdp: torch.distributed.checkpoint files (model, optimizer)
            manifest.json           counters, run config, objects, size and CRC-32 of every file
            COMPLETE                written last: sha256 of manifest.json
        .step-000180.tmp-1a2b3c4d/  a save in progress (or killed): never read

A checkpoint is written under a hidden temporary name and renamed when complete,
so a directory with a visible name and a ``COMPLETE`` marker is a whole checkpoint.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from paratrain.errors import ConfigError

MANIFEST = "manifest.json"
COMPLETE = "COMPLETE"
LATEST = "latest"
RNG_FILE = "rng.pt"
SHARDED_DIR = "sharded"
FORMAT = "paratrain-checkpoint"
FORMAT_VERSION = 4  # 4: CRC-32C where the CPU has it; 3: .pt files of packed tensors (checkpoint/packed.py); 2: data files
#                     checksummed with CRC-32 (1: SHA-256); all read

#: Names that stateful objects may not take (they are files of their own).
RESERVED_NAMES = frozenset({"rng", "manifest", "sharded", "latest", "complete"})


def checkpoint_name(step: int | None, epoch: int | None) -> str:
    """``step-000120`` (or ``epoch-0003`` when only the epoch is known).

    Raises:
        ConfigError: neither is given, or one is not a non-negative integer.
    """
    for label, value in (("step", step), ("epoch", epoch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError(f"save({label}={value!r}): {label} must be a non-negative integer")
    if step is not None:
        return f"step-{step:06d}"
    if epoch is not None:
        return f"epoch-{epoch:04d}"
    raise ConfigError("save() needs step= or epoch= to name the checkpoint, e.g. ckpt.save(step=step, epoch=epoch)")


#: The names paratrain gives checkpoints (:func:`checkpoint_name`), and its temporary and set-aside
#: entries beside them (:func:`temporary_name`, :func:`set_aside_name`, ``write_atomic``'s for ``latest``).
OWN_NAME = re.compile(r"(step-\d{6,}|epoch-\d{4,})")
OWN_LEFTOVER = re.compile(r"\.(step-\d{6,}|epoch-\d{4,}|latest)\.(tmp|replaced)-[0-9a-f]{8}")


def is_own_name(name: str) -> bool:
    """A name paratrain gives a checkpoint: ``step-NNNNNN`` or ``epoch-NNNN``."""
    return OWN_NAME.fullmatch(name) is not None


def is_own_leftover(name: str) -> bool:
    """What a killed save of paratrain's left beside the checkpoints (removed by the next save)."""
    return OWN_LEFTOVER.fullmatch(name) is not None


def temporary_name(name: str, suffix: str | None = None) -> str:
    """The hidden name ``name`` is written under: with ``suffix`` (one every rank holds, so none need be told
    rank 0's), the same on every rank; else a new random one."""
    return f".{name}.tmp-{suffix or uuid.uuid4().hex[:8]}"


def set_aside_name(name: str) -> str:
    return f".{name}.replaced-{uuid.uuid4().hex[:8]}"


def is_hidden(path: Path) -> bool:
    """Temporary, set-aside and probe entries start with a dot and are never checkpoints."""
    return path.name.startswith(".")


def looks_like_checkpoint(path: Path) -> bool:
    """A visible directory with a manifest or a completion marker."""
    path = Path(path)
    return path.is_dir() and not is_hidden(path) and ((path / MANIFEST).exists() or (path / COMPLETE).exists())


def model_file(name: str) -> str:
    return f"{name}.safetensors"


def state_file(name: str) -> str:
    return f"{name}.pt"
