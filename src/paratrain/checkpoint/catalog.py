"""The checkpoints of one directory: which are complete, newest good, best, latest, expendable.

Order is the ``sequence`` number each save takes (one more than any before), not
the step: a run resumed from step 60 after a damaged step-120 writes its new
step-120 later than the damaged one, and the newer is the one to trust.

Only paratrain's own checkpoints count: a folder named as paratrain names one
(``step-NNNNNN``, ``epoch-NNNN``) whose manifest gives that same name. A folder a user
renamed or copied (``keep-me``, ``my-final``, ``step-000099`` holding step 45) is never
resumed from, rotated, set aside or deleted; it is mentioned once (:func:`mention_foreign`).
A user who wants to resume from one gives it its own name back.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

from paratrain.checkpoint.files import fsync_path, write_atomic
from paratrain.checkpoint.layout import COMPLETE, LATEST, is_hidden, is_own_name, looks_like_checkpoint
from paratrain.checkpoint.manifest import Manifest, read_manifest, verify
from paratrain.errors import CheckpointError

Saved = tuple[Path, Manifest]


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped (incomplete or damaged) in favour of an older one."""


class WorldChangeWarning(CheckpointWarning):
    """A checkpoint saved by another number of ranks was loaded: how the run continues."""


def _candidates(root: Path) -> list[Path]:
    """Checkpoint-looking folders under paratrain's names (not links: a link is never one of its own)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if is_own_name(p.name) and not p.is_symlink() and looks_like_checkpoint(p))


def complete(root: Path, warn: bool = False) -> list[Saved]:
    """paratrain's checkpoints with a marker and a matching manifest that names them, oldest first
    (files not hashed). A folder whose manifest names another checkpoint (a copy) is left out."""
    found: list[Saved] = []
    for path in _candidates(root):
        try:
            manifest = read_manifest(path)
        except CheckpointError as exc:
            if warn:
                warnings.warn(f"skipping checkpoint {path}: {exc}", CheckpointWarning, stacklevel=3)
            continue
        if manifest.name == path.name:
            found.append((path, manifest))
    return sorted(found, key=lambda saved: saved[1].sequence)


_mentioned: set[tuple[str, str]] = set()


def foreign(root: Path) -> list[Path]:
    """Folders under ``root`` that look like checkpoints but are not paratrain's own under the name it
    wrote (renamed, copied, linked): never resumed from, rotated, set aside or deleted."""
    root = Path(root)
    if not root.is_dir():
        return []
    own = {path for path, _ in complete(root)}
    found = []
    for path in sorted(root.iterdir()):
        if is_hidden(path) or path.name == DAMAGED_DIR or path in own or not looks_like_checkpoint(path):
            continue
        if is_own_name(path.name) and not path.is_symlink() and not (path / COMPLETE).exists():
            continue  # an unfinished save of paratrain's: skipped with its own warning
        if is_own_name(path.name) and not path.is_symlink() and _manifest_name(path) in (None, path.name):
            continue  # paratrain's, damaged: resume_point sets it aside
        found.append(path)
    return found


def _manifest_name(path: Path) -> str | None:
    try:
        return read_manifest(path).name
    except CheckpointError:
        return None


def mention_foreign(root: Path) -> None:
    """One :class:`CheckpointWarning` per process for the folders :func:`foreign` finds in ``root``."""
    for path in foreign(root):
        key = (str(Path(root).resolve()), path.name)
        if key in _mentioned:
            continue
        _mentioned.add(key)
        held = _manifest_name(path)
        holds = f" (it holds {held}: name it {held} to resume from it)" if held and held != path.name else ""
        warnings.warn(f"{path} is not a checkpoint paratrain wrote under that name{holds}; it is left alone: "
                      "never resumed from, rotated or deleted", CheckpointWarning, stacklevel=3)


def newest_verified(root: Path) -> Saved | None:
    """The newest checkpoint whose files all match their checksums.

    Every newer one that is incomplete, truncated or corrupted gets a
    :class:`CheckpointWarning` naming the file, and is skipped.
    """
    mention_foreign(root)
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


DAMAGED_DIR = "damaged"  # inside a checkpoints directory: damaged checkpoints, set aside, never deleted


def resume_point(root: Path) -> Saved | None:
    """The checkpoint a run resumes from: the newest verified one. For the one writer of ``root`` only.

    Each newer checkpoint whose save had finished but whose files no longer match (truncated,
    corrupted) is moved to ``root/damaged/`` with a :class:`CheckpointWarning` saying where,
    so that rotation never deletes it and a person can look at it. ``None`` when ``root``
    holds no finished checkpoint at all (a fresh start).

    Raises:
        CheckpointError: finished checkpoints exist but none verifies: starting from step 0
            would silently throw the run away, so the message names each one and its damage
            (they are left where they are).
    """
    mention_foreign(root)
    damaged: list[tuple[Path, str]] = []
    unreadable = _finished_unreadable(root)  # warns about unfinished saves (no marker): skipped, left alone
    for path, _ in reversed(complete(root)):
        try:
            found = path, verify(path)
        except CheckpointError as exc:
            damaged.append((path, str(exc)))
            continue
        for bad, problem in damaged + unreadable:
            aside = set_aside(bad)
            warnings.warn(f"checkpoint {bad.name} is damaged ({problem}); moved to {aside}, resuming from "
                          f"{path.name}", CheckpointWarning, stacklevel=2)
        return found
    finished = damaged + unreadable
    if finished:
        listed = "; ".join(f"{p.name}: {problem}" for p, problem in finished)
        raise CheckpointError(
            f"{root} holds {len(finished)} checkpoint(s) and none is intact ({listed}); nothing was deleted. "
            "Restore the files (e.g. from a copy), or start over deliberately with --fresh (pt.fit: fresh=True), "
            "which moves this run aside"
        )
    return None


def _finished_unreadable(root: Path) -> list[tuple[Path, str]]:
    """Checkpoints whose save finished (a ``COMPLETE`` marker) but whose manifest cannot be read,
    with the reason; a :class:`CheckpointWarning` for each unfinished one (no marker), which is skipped."""
    found = []
    for path in _candidates(root):
        try:
            read_manifest(path)
        except CheckpointError as exc:
            if (path / COMPLETE).exists():
                found.append((path, str(exc)))
            else:
                warnings.warn(f"skipping checkpoint {path}: {exc}", CheckpointWarning, stacklevel=3)
    return found


def set_aside(path: Path) -> Path:
    """Move a damaged checkpoint to ``<its directory>/damaged/<name>[-N]``; return where."""
    target_dir = path.parent / DAMAGED_DIR
    target_dir.mkdir(exist_ok=True)
    target = target_dir / path.name
    suffix = 1
    while target.exists():
        target = target_dir / f"{path.name}-{suffix}"
        suffix += 1
    os.replace(path, target)
    fsync_path(path.parent)
    return target


def read_latest(root: Path) -> Path | None:
    """The checkpoint the ``latest`` pointer names, if the pointer and the directory exist."""
    pointer = Path(root) / LATEST
    try:
        name = pointer.read_text().strip()
    except OSError:
        return None
    target = Path(root) / name
    return target if is_own_name(name) and looks_like_checkpoint(target) else None


def write_latest(root: Path, name: str) -> None:
    """Point ``latest`` at ``name`` atomically (temp file, fsync, rename, fsync dir)."""
    write_atomic(Path(root) / LATEST, name + "\n")


def is_better(value: object, than: float | None, mode: str) -> bool:
    """The one rule for "best", used by the fit loop and by the catalog: a finite value that is
    strictly better than ``than`` (``max``: higher, ``min``: lower). A tie is not better, so the
    earliest checkpoint to reach a value stays the best; NaN and inf never are."""
    if not _finite(value):
        return False
    return than is None or (value > than if mode == "max" else value < than)  # type: ignore[operator]


def best(saved: list[Saved], metric: str | None, mode: str) -> Path | None:
    """The checkpoint with the best finite ``metric`` (``max`` or ``min``) by :func:`is_better`:
    on a tie the earliest saved (lowest ``sequence``) wins, as in the fit loop's report."""
    if not metric:
        return None
    found: tuple[float, Path] | None = None
    for path, manifest in saved:  # oldest first
        value = manifest.metrics.get(metric)
        if is_better(value, None if found is None else found[0], mode):
            found = (value, path)  # type: ignore[assignment]
    return None if found is None else found[1]


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
