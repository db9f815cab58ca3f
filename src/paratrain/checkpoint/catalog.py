"""The checkpoints of one directory: which are complete, newest good, best, latest, expendable.

Order is the ``sequence`` number each save takes (one more than any before), not
the step: a run resumed from step 60 after a damaged step-120 writes its new
step-120 later than the damaged one, and the newer is the one to trust.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

from paratrain.checkpoint.files import write_atomic
from paratrain.checkpoint.layout import LATEST, is_hidden, looks_like_checkpoint
from paratrain.checkpoint.manifest import Manifest, read_manifest, verify
from paratrain.errors import CheckpointError

Saved = tuple[Path, Manifest]


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped (incomplete or damaged) in favour of an older one."""


def _candidates(root: Path) -> list[Path]:
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if looks_like_checkpoint(p))


def complete(root: Path, warn: bool = False) -> list[Saved]:
    """Checkpoints with a marker and a matching manifest, oldest first (files not hashed)."""
    found: list[Saved] = []
    for path in _candidates(root):
        try:
            found.append((path, read_manifest(path)))
        except CheckpointError as exc:
            if warn:
                warnings.warn(f"skipping checkpoint {path}: {exc}", CheckpointWarning, stacklevel=3)
    return sorted(found, key=lambda saved: saved[1].sequence)


def newest_verified(root: Path) -> Saved | None:
    """The newest checkpoint whose files all match their checksums.

    Every newer one that is incomplete, truncated or corrupted gets a
    :class:`CheckpointWarning` naming the file, and is skipped.
    """
    for path, _ in reversed(complete(root, warn=True)):
        try:
            return path, verify(path)
        except CheckpointError as exc:
            warnings.warn(
                f"checkpoint {path.name} is damaged and was skipped ({exc}); falling back to the previous one",
                CheckpointWarning,
                stacklevel=2,
            )
    return None


def next_sequence(root: Path) -> int:
    return max((m.sequence for _, m in complete(root)), default=0) + 1


def read_latest(root: Path) -> Path | None:
    """The checkpoint the ``latest`` pointer names, if the pointer and the directory exist."""
    pointer = Path(root) / LATEST
    try:
        name = pointer.read_text().strip()
    except OSError:
        return None
    target = Path(root) / name
    return target if name and "/" not in name and looks_like_checkpoint(target) else None


def write_latest(root: Path, name: str) -> None:
    """Point ``latest`` at ``name`` atomically (temp file, fsync, rename, fsync dir)."""
    write_atomic(Path(root) / LATEST, name + "\n")


def best(saved: list[Saved], metric: str | None, mode: str) -> Path | None:
    """The checkpoint with the best ``metric`` (``max`` or ``min``); the newest wins ties."""
    if not metric:
        return None
    scored = [(m.metrics[metric], m.sequence, p) for p, m in saved if _finite(m.metrics.get(metric))]
    if not scored:
        return None
    sign = 1 if mode == "max" else -1
    return max(scored, key=lambda item: (sign * item[0], item[1]))[2]


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def expendable(saved: list[Saved], keep_last: int | None, keep: set[Path]) -> list[Path]:
    """Checkpoints beyond the newest ``keep_last``, except those in ``keep`` (best, latest)."""
    if keep_last is None:
        return []
    newest = {p for p, _ in saved[-keep_last:]}
    return [p for p, _ in saved if p not in newest and p not in keep]


def resolve(path: Path | str) -> Path:
    """A user's path → a checkpoint directory (or a weights file, returned as is).

    Accepts a checkpoint directory, a checkpoints directory (its newest good
    checkpoint), a run directory holding ``checkpoints/``, or a file.

    Raises:
        CheckpointError: the path does not exist, holds no complete checkpoint, or
            is not a checkpoint at all.
    """
    path = Path(path)
    hint = "pass a checkpoint directory (…/checkpoints/step-000120), its checkpoints directory, or the run directory"
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: the path does not exist; {hint}")
    if path.is_file() or looks_like_checkpoint(path):
        return path
    for root in (path, path / "checkpoints"):
        if _candidates(root) and not is_hidden(root):
            found = newest_verified(root)
            if found is None:
                raise CheckpointError(f"{root} holds no complete, undamaged checkpoint; {hint}")
            return found[0]
    raise CheckpointError(f"{path} is not a paratrain checkpoint (no {LATEST}, manifest.json or step-* inside); {hint}")
