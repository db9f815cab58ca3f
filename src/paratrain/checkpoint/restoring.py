"""Loading one verified checkpoint into the live objects, in three agreed steps.

1. every rank reads the one-file parts and checks that each model fits
   (missing/unexpected keys, shapes) — nothing is changed yet;
2. sharded parts are read by DCP into the models' and optimizers' current layout
   (another world size is resharded by DCP);
3. models, then optimizers, then other objects are loaded; each rank restores its
   own RNG states last.

A rank that fails a step makes every rank raise the same error (see :mod:`.all_or_none`).
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paratrain import comm
from paratrain.checkpoint import rng
from paratrain.checkpoint.all_or_none import on_all_ranks
from paratrain.checkpoint.catalog import CheckpointWarning, WorldChangeWarning
from paratrain.checkpoint.keys import check_fits, shapes, strip_wrapper_prefixes
from paratrain.checkpoint.manifest import Manifest
from paratrain.checkpoint.model_state import model_layout, optimizer_layout
from paratrain.checkpoint.reader import load_sharded, read_rng, read_weights_file, sharded_metadata, sharded_shapes
from paratrain.checkpoint.safe_load import load_pt, load_safetensors
from paratrain.checkpoint.stateful import Stateful
from paratrain.errors import CheckpointError, ConfigError, SharedStorageError

if TYPE_CHECKING:
    from paratrain.checkpoint.checkpointer import Checkpointer


@dataclasses.dataclass(frozen=True)
class CheckpointState:
    """What ``resume()`` / ``load()`` restored, and where to continue.

    ``epoch`` is the epoch to continue in: the restored training loader's epoch when
    one was saved (a finished epoch was saved as the start of the next), else the
    epoch given to ``save()``. ``rt.epochs(state, total)`` starts there.
    """

    path: Path
    step: int | None
    epoch: int | None
    saved_epoch: int | None
    metrics: dict[str, float]
    extra: dict[str, Any]
    run: dict[str, Any]


@dataclasses.dataclass
class _Part:
    entry: Stateful
    state: Any
    full: bool  # whole tensors from one file (vs the model's own layout filled by DCP)


def restore(ckpt: Checkpointer, directory: Path, manifest: Manifest) -> CheckpointState:
    """Load ``manifest``'s checkpoint at ``directory`` into ``ckpt``'s objects. Collective."""
    label = f"cannot load checkpoint {directory}"
    parts, sharded, own_rng, saved_ranks = on_all_ranks(label, lambda: _read(ckpt, directory, manifest))
    if sharded:
        on_all_ranks(label, lambda: load_sharded(directory, {p.entry.name: p.state for p in sharded}))
    on_all_ranks(label, lambda: _apply(ckpt, parts + sharded, own_rng))
    if saved_ranks and saved_ranks != comm.world_size() and comm.is_main():
        warnings.warn(_world_change(ckpt, manifest, saved_ranks), WorldChangeWarning, stacklevel=3)
    return CheckpointState(
        path=Path(directory),
        step=manifest.step,
        epoch=_continue_epoch(ckpt.entries, manifest),
        saved_epoch=manifest.epoch,
        metrics=dict(manifest.metrics),
        extra=dict(manifest.extra),
        run=dict(manifest.run),
    )


def restore_weights_file(ckpt: Checkpointer, path: Path) -> CheckpointState:
    """Load a lone weights file into the Checkpointer's one model. Collective.

    Raises:
        ConfigError: the Checkpointer has no model or several.
        CheckpointError: unreadable, pickled objects, or does not fit the model.
    """
    models = [e for e in ckpt.entries if e.kind == "model"]
    if len(models) != 1:
        raise ConfigError(f"{path} is a weights file for one model; this Checkpointer has {len(models)} models")

    def read_and_load() -> None:
        state = read_weights_file(path)
        check_fits(shapes(state), shapes(ckpt.access.model_layout(models[0].obj)), str(path))
        ckpt.access.load_model(models[0].obj, state, full=True)

    on_all_ranks(f"cannot load {path}", read_and_load)
    return CheckpointState(path=path, step=None, epoch=None, saved_epoch=None, metrics={}, extra={}, run={})


def _read(ckpt: Checkpointer, directory: Path, manifest: Manifest) -> tuple[list[_Part], list[_Part], Any, int]:
    if not directory.is_dir():  # rank 0 found it; this rank runs on a node that cannot see it
        raise SharedStorageError(
            f"{directory} is not visible on this node; keep checkpoints on a filesystem every node shares "
            "(NFS, Lustre, ...), or copy them to the same path on each node"
        )
    parts: list[_Part] = []
    sharded: list[_Part] = []
    metadata = sharded_metadata(directory) if manifest.sharded else None
    for entry in ckpt.entries:
        saved = manifest.objects.get(entry.name)
        if saved is None:
            if entry.optional:
                continue
            raise CheckpointError(
                f"{directory.name} has no {entry.name!r} (it holds {', '.join(manifest.objects) or 'nothing'}); "
                f"remove {entry.name}= from the Checkpointer to load it, or use a new checkpoint directory"
            )
        if saved["kind"] != entry.kind:
            raise CheckpointError(f"{entry.name!r} is a {saved['kind']} in {directory.name}, but a {entry.kind} was given")
        source = f"{entry.name!r} of {directory}"
        if entry.kind == "model":
            expected = shapes(ckpt.access.model_layout(entry.obj))
            if saved.get("sharded"):
                check_fits(sharded_shapes(metadata, entry.name), expected, source)
                sharded.append(_Part(entry, model_layout(entry.obj), full=False))
            else:
                state = strip_wrapper_prefixes(load_safetensors(directory / saved["file"]))
                check_fits(shapes(state), expected, source)
                parts.append(_Part(entry, state, full=True))
        elif entry.kind == "optimizer" and saved.get("sharded"):
            sharded.append(_Part(entry, optimizer_layout(ckpt.model_of(entry), entry.obj), full=False))
        elif entry.kind == "per_rank":
            own = _own_per_rank(entry.name, load_pt(directory / saved["file"])["ranks"], manifest)
            if own is not None:
                parts.append(_Part(entry, own, full=True))
        else:
            parts.append(_Part(entry, load_pt(directory / saved["file"]), full=True))
    states = read_rng(directory, manifest)
    own = states[comm.rank()] if comm.rank() < len(states) else None
    return parts, sharded, own, len(states)


def _world_change(ckpt: Checkpointer, manifest: Manifest, saved_ranks: int) -> str:
    """What a checkpoint loaded by another number of ranks continues as (read after loading: a
    training loader of the global order that loaded a state of that order keeps the trajectory)."""
    head = f"checkpoint {manifest.name} was saved by {saved_ranks} rank(s) and is loaded by {comm.world_size()}: "
    loaders = [e.obj for e in ckpt.entries if e.kind == "state" and hasattr(e.obj, "keeps_trajectory")]
    if loaders and all(loader.keeps_trajectory for loader in loaders):
        return head + ("the data order and global batch are kept, so the run continues on the same trajectory up to "
                       "floating-point rounding; random streams drawn per rank (dropout) are restored only where "
                       "a rank had one, and differ")
    return head + ("each rank that has a saved random state restores it, so the run continues, but not bit-for-bit "
                   "as it would have at the saved world size")


def _own_per_rank(name: str, states: list[Any], manifest: Manifest) -> Any:
    """This rank's saved state, or None (with a warning) when the world size changed: state
    that differs per rank (PowerSGD's error feedback) has no owner then and starts afresh."""
    if len(states) == comm.world_size():
        return states[comm.rank()]
    if comm.is_main():
        warnings.warn(
            f"checkpoint {manifest.name} holds {name!r} state of {len(states)} rank(s) and is loaded by "
            f"{comm.world_size()}: that per-rank state (e.g. PowerSGD's error feedback) starts afresh",
            CheckpointWarning,
            stacklevel=5,
        )
    return None


def _apply(ckpt: Checkpointer, parts: list[_Part], own_rng: Any) -> None:
    order = {"model": 0, "optimizer": 1, "state": 2, "per_rank": 3}
    for part in sorted(parts, key=lambda p: order[p.entry.kind]):
        entry = part.entry
        try:
            if entry.kind == "model":
                ckpt.access.load_model(entry.obj, part.state, full=part.full)
            elif entry.kind == "optimizer":
                ckpt.access.load_optimizer(ckpt.model_of(entry), entry.obj, part.state, full=part.full)
            else:
                entry.obj.load_state_dict(part.state)
        except CheckpointError:
            raise
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise CheckpointError(f"loading {entry.name!r} failed: {type(exc).__name__}: {first}") from exc
    if own_rng is not None:
        rng.restore(own_rng)


def _continue_epoch(entries: list[Stateful], manifest: Manifest) -> int | None:
    for entry in entries:
        epoch = getattr(entry.obj, "epoch", None) if entry.kind == "state" else None
        if isinstance(epoch, int) and not isinstance(epoch, bool):
            return epoch
    return manifest.epoch
