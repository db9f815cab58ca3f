"""One consolidated, prefix-free safetensors file from any checkpoint (``paratrain ckpt export``).

The job DeepSpeed's ``zero_to_fp32.py`` does after a ZeRO run: whatever wrote the
checkpoint (one file or fsdp shards from any number of ranks), the result loads
with plain PyTorch::

    model.load_state_dict(safetensors.torch.load_file("model.safetensors"))

Sharded checkpoints are read through DCP in this one process (it maps every
saved chunk into whole tensors), with the safe readers of
:mod:`paratrain.checkpoint.safe_load` — not ``dcp_to_torch_save``, whose reader
unpickles the metadata without restriction.
"""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path
from typing import Any

import torch

from paratrain.checkpoint.catalog import resolve
from paratrain.checkpoint.files import describe_os_error, fsync_path
from paratrain.checkpoint.manifest import verify
from paratrain.checkpoint.reader import pick_model, read_full_model, read_weights_file
from paratrain.checkpoint.writer import safetensors_ready
from paratrain.errors import CheckpointError


def read_model_state(path: str | Path, model: str | None = None) -> tuple[dict[str, torch.Tensor], Path]:
    """Whole, prefix-free CPU tensors of one model, and the checkpoint they came from.

    ``path`` is anything :func:`~paratrain.checkpoint.catalog.resolve` accepts. The
    checkpoint is verified first. Not collective (one process reads everything).

    Raises:
        CheckpointError: not found, not a checkpoint, damaged, several models and
            none named, or pickled objects inside.
    """
    for _ in range(3):
        source = resolve(path)
        if source.is_file():
            return read_weights_file(source), source
        try:
            manifest = verify(source)
            name = pick_model(manifest, model, source)
            return read_full_model(source, manifest, name), source
        except CheckpointError:
            if source.exists():
                raise  # still there: the damage is real
            # Removed while read: a live run's --keep-last rotation (or a user) took it away; that is no
            # damage. Given a run or checkpoints directory, read the newest one again.
            if Path(path).resolve() == source.resolve():
                raise CheckpointError(f"{source} was removed while it was being read (a live run rotating its "
                                      "checkpoints: --keep-last); nothing is damaged: export the run directory "
                                      "(its newest checkpoint) or one the run keeps (its best)") from None
    raise CheckpointError(f"the checkpoints under {path} were rotated away three times while being read (a live run "
                          "saving often): export again, or after the run ends")


def export(path: str | Path, output: str | Path, model: str | None = None, force: bool = False) -> dict[str, Any]:
    """Write model weights of the checkpoint at ``path`` to one safetensors file ``output``.

    Returns a summary: source, output, tensors, parameters, bytes.

    Raises:
        CheckpointError: ``output`` exists and ``force`` is false (nothing written),
            or the checkpoint cannot be read (see :func:`read_model_state`), or the
            output cannot be written.
    """
    output = Path(output)
    if output.exists() and not force:
        raise CheckpointError(f"{output} already exists; pass --force (force=True) to overwrite it, or choose another -o")
    if output.is_dir():
        raise CheckpointError(f"{output} is a directory; give a file name such as {output / 'model.safetensors'}")
    state, source = read_model_state(path, model)
    write_weights_file(state, output, metadata={"format": "pt", "source": str(source)})
    return {
        "source": str(source),
        "output": str(output),
        "tensors": len(state),
        "parameters": sum(t.numel() for t in state.values()),
        "bytes": output.stat().st_size,
    }


def write_weights_file(state: dict[str, torch.Tensor], output: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """Write ``state`` to the safetensors file ``output`` atomically (replacing it). Not collective.

    Raises:
        CheckpointError: a non-tensor entry, or the file cannot be written.
    """
    from safetensors.torch import save_file

    output = Path(output)
    if output.is_dir():
        raise CheckpointError(f"{output} is a directory; give a file name such as {output / 'model.safetensors'}")
    temporary = output.with_name(f".{output.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        save_file(safetensors_ready("model", state), str(temporary), metadata=metadata or {"format": "pt"})
        os.chmod(temporary, _file_mode(output))  # safetensors creates 0600: a shared model file must stay readable
        fsync_path(temporary)
        os.replace(temporary, output)
        fsync_path(output.parent)
    except OSError as exc:
        raise CheckpointError(describe_os_error(exc, f"cannot write {output}")) from exc
    finally:
        temporary.unlink(missing_ok=True)
    return output


def _file_mode(output: Path) -> int:
    """The mode a replaced file keeps, or a new file's usual mode (0666 less the umask)."""
    try:
        return stat.S_IMODE(output.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def save_weights(state: dict[str, torch.Tensor], output: str | Path) -> Path:
    """Rank 0 writes ``state`` (its full weights) to ``output``; every rank returns the path. Collective.

    Raises:
        CheckpointError: on every rank, when rank 0 could not write the file.
    """
    from paratrain import comm
    from paratrain.checkpoint.all_or_none import main_then_share

    main_then_share(f"cannot write {output}", lambda: str(write_weights_file(state, output)) if comm.is_main() else None)
    return Path(output)
