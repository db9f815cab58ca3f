"""Read IDX files (the MNIST format), raw or gzipped, and check them before trusting them.

Layout (LeCun's MNIST page): two zero bytes, a type byte (0x08 = unsigned byte),
the number of dimensions, one big-endian uint32 per dimension, then the values.
The two-machine MNIST tutorial reads them with ``assert`` (which ``python -O`` removes) and ``strict=False``
(which accepts a truncated file); here every check is an error that names the
file and what was expected.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from paratrain.errors import DataError

UNSIGNED_BYTE = 0x08


def find_idx(directory: Path, stem: str) -> Path:
    """``directory/stem`` or ``directory/stem.gz``.

    Raises:
        DataError: neither exists (names both).
    """
    for candidate in (directory / stem, directory / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"{directory} has no {stem} or {stem}.gz; put the MNIST IDX files there (raw or .gz)")


def read_idx(path: Path, dims: int) -> np.ndarray:
    """The unsigned-byte array stored in ``path`` with exactly ``dims`` dimensions.

    Raises:
        DataError: not gzip when named .gz, wrong magic number, wrong number of
            dimensions, or a size that does not match the header.
    """
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"{path} cannot be read as {'gzip' if path.suffix == '.gz' else 'a file'} ({exc}); replace it with the original IDX file") from None
    expected_magic = (UNSIGNED_BYTE << 8) | dims
    if len(raw) < 4:
        raise DataError(f"{path} has {len(raw)} bytes, too short for an IDX header; expected magic 0x{expected_magic:08x}")
    (magic,) = struct.unpack(">I", raw[:4])
    if magic != expected_magic:
        raise DataError(
            f"{path} has magic number 0x{magic:08x}, expected 0x{expected_magic:08x} "
            f"(IDX, unsigned bytes, {dims} dimension{'s' if dims > 1 else ''}); is it the right file, or not decompressed?"
        )
    header = 4 + 4 * dims
    if len(raw) < header:
        raise DataError(f"{path} ends inside its header ({len(raw)} bytes, expected at least {header})")
    shape = struct.unpack(f">{dims}I", raw[4:header])
    expected = header + int(np.prod(shape))
    if len(raw) != expected:
        raise DataError(
            f"{path} has {len(raw)} bytes but its header {tuple(shape)} needs {expected}; the file is truncated or corrupt"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def read_pair(directory: Path, images_stem: str, labels_stem: str, height: int, width: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, height, width)`` and labels ``(N,)`` that belong together.

    Raises:
        DataError: a file is missing or malformed, image size is not
            ``height × width``, counts differ, or a label is not below ``classes``.
    """
    images_path, labels_path = find_idx(directory, images_stem), find_idx(directory, labels_stem)
    images, labels = read_idx(images_path, 3), read_idx(labels_path, 1)
    if images.shape[1:] != (height, width):
        raise DataError(f"{images_path} holds {images.shape[1]}x{images.shape[2]} images, expected {height}x{width}")
    if len(images) != len(labels):
        raise DataError(f"{images_path} has {len(images)} images but {labels_path} has {len(labels)} labels; use files of the same set")
    if len(labels) and int(labels.max()) >= classes:
        raise DataError(f"{labels_path} holds label {int(labels.max())}, expected 0..{classes - 1}")
    return images, labels
