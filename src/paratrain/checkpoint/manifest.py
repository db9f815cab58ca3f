"""``manifest.json`` and ``COMPLETE``: what a checkpoint holds, and proof that it is whole.

The manifest lists the counters, the run's configuration, which file holds which
object, and the size and checksum of every file (CRC-32C where the CPU computes it, else CRC-32; SHA-256 in
checkpoints of format 1, still checked).
``COMPLETE`` is written last and holds the SHA-256 of the manifest, so a checkpoint is trusted only
when the marker exists, the manifest matches it, and every file matches the manifest.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path, PurePosixPath
from typing import Any

from paratrain.checkpoint.files import crc32_file, crc32c_file, data_checksum, fsync_path, sha256_file, write_atomic
from paratrain.checkpoint.layout import COMPLETE, FORMAT, FORMAT_VERSION, MANIFEST
from paratrain.errors import CheckpointError


@dataclasses.dataclass
class Manifest:
    """Everything a checkpoint says about itself (``manifest.json``)."""

    name: str
    sequence: int
    step: int | None = None
    epoch: int | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: world_size, strategy, precision, seed, paratrain and torch versions, …
    run: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: object name → {"kind": "model"|"optimizer"|"state", "file": …} or {"kind", "sharded": key}
    objects: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    #: path relative to the checkpoint → {"bytes": n, "crc32c" or "crc32": hex} (format 1: "sha256")
    files: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    sharded: bool = False
    created: str = ""
    format: str = FORMAT
    version: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def data_files(directory: Path) -> list[Path]:
    """Every file under ``directory`` except the manifest and the marker, sorted."""
    return sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.name not in (MANIFEST, COMPLETE))


def seal(directory: Path, manifest: Manifest) -> None:
    """Checksum every file, write ``manifest.json``, then ``COMPLETE``; fsync all of it.

    Raises:
        OSError: a write failed (the directory then has no marker: not a checkpoint).
    """
    directory = Path(directory)
    manifest.files = {}
    for path in data_files(directory):
        fsync_path(path)
        kind, checksum = data_checksum(path)
        manifest.files[path.relative_to(directory).as_posix()] = {"bytes": path.stat().st_size, kind: checksum}
    for sub in sorted({p.parent for p in data_files(directory)} - {directory}):
        fsync_path(sub)
    manifest.created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_atomic(directory / MANIFEST, manifest.to_json())
    write_atomic(directory / COMPLETE, f"sha256 {sha256_file(directory / MANIFEST)}\n")


def read_manifest(directory: Path) -> Manifest:
    """The manifest of a complete checkpoint (the marker and the manifest agree).

    Raises:
        CheckpointError: no marker (an unfinished save), no or unreadable manifest,
            a manifest that does not match its marker (corrupted), or the checkpoint removed while it was read.
    """
    directory = Path(directory)
    marker, manifest_path = directory / COMPLETE, directory / MANIFEST
    if not marker.exists():
        raise CheckpointError(f"{directory} has no {COMPLETE} marker: its save never finished; it is not a checkpoint")
    if not manifest_path.exists():
        raise CheckpointError(f"{manifest_path} is missing; the checkpoint is damaged")
    try:
        expected = marker.read_text().split()[-1:]
        if expected != [sha256_file(manifest_path)]:
            raise CheckpointError(f"{manifest_path} does not match its {COMPLETE} marker (corrupted or edited)")
        data = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        # Read beside the run that writes it (`paratrain goodput`, a watcher): its retention removed it meanwhile.
        raise CheckpointError(f"{directory} was removed while it was read (an older checkpoint its run pruned)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{manifest_path} is not valid JSON ({exc}); the checkpoint is damaged") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{manifest_path} is not a paratrain checkpoint manifest")
    if int(data.get("version", 0)) > FORMAT_VERSION:
        raise CheckpointError(
            f"{directory} has checkpoint format {data.get('version')}, newer than this paratrain reads "
            f"({FORMAT_VERSION}); upgrade paratrain"
        )
    manifest = Manifest.from_dict(data)
    outside = [name for name in _named_files(manifest) if not _inside(name)]
    if outside:
        raise CheckpointError(f"{manifest_path} names {outside[0]!r}, outside its checkpoint: a checkpoint reads only "
                              "its own files; the manifest is damaged or was edited, and is not followed")
    return manifest


def _named_files(manifest: Manifest) -> list[str]:
    named = [str(name) for name in manifest.files]
    for entry in manifest.objects.values():
        if isinstance(entry, dict) and "file" in entry:
            named.append(str(entry["file"]))
    return named


def _inside(relative: str) -> bool:
    """A path relative to the checkpoint that stays in it (no ``..``, not absolute, not empty)."""
    parts = PurePosixPath(relative).parts
    return bool(parts) and not relative.startswith(("/", "\\")) and ".." not in parts and "\\" not in relative


def file_problems(directory: Path, manifest: Manifest) -> dict[str, str]:
    """``{file: problem}`` for every listed file that is missing, truncated or altered."""
    problems: dict[str, str] = {}
    for relative, expected in manifest.files.items():
        path = Path(directory) / relative
        if any((Path(directory) / part).is_symlink() for part in [*PurePosixPath(relative).parents][:-1] + [relative]):
            problems[relative] = "a symbolic link (a checkpoint's files are its own, never followed)"
        elif not path.is_file():
            problems[relative] = "missing"
        elif path.stat().st_size != expected["bytes"]:
            problems[relative] = f"truncated or extended: {path.stat().st_size} bytes, expected {expected['bytes']}"
        elif not any(kind in expected for kind in _CHECKSUMS):
            problems[relative] = "no checksum listed for it (the manifest is damaged or was edited)"
        elif not _matches(path, expected):
            problems[relative] = "checksum mismatch (corrupted)"
    return problems


#: how a manifest's file entry may be checksummed: CRC-32C or CRC-32 (format 4), CRC-32 (formats 2, 3), SHA-256 (1)
_CHECKSUMS = {"crc32c": crc32c_file, "crc32": crc32_file, "sha256": sha256_file}


def _matches(path: Path, expected: dict[str, Any]) -> bool:
    """The file has the checksum its manifest entry lists (every one it lists)."""
    return all(checksum(path) == expected[kind] for kind, checksum in _CHECKSUMS.items() if kind in expected)


def verify(directory: Path) -> Manifest:
    """Read the manifest and check every file against it.

    Raises:
        CheckpointError: incomplete, or a file is missing, truncated or corrupted
            (the message names the file).
    """
    manifest = read_manifest(directory)
    problems = file_problems(directory, manifest)
    if problems:
        first, problem = next(iter(problems.items()))
        more = f" (and {len(problems) - 1} more file(s))" if len(problems) > 1 else ""
        raise CheckpointError(f"{Path(directory) / first}: {problem}{more}")
    return manifest
