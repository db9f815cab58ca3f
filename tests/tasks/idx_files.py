"""Write small MNIST-format IDX files for tests (raw or gzipped)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX encoding of an unsigned-byte array: magic 0x0000_08_<dims>, big-endian sizes, values."""
    header = struct.pack(">I", (0x08 << 8) | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx(path: Path, array: np.ndarray) -> Path:
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def digit_images(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """28×28 images whose label is drawn as a bright bar at a label-specific row: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=count).astype(np.uint8)
    images = rng.integers(0, 40, size=(count, 28, 28)).astype(np.uint8)
    for image, label in zip(images, labels):
        row = 2 + int(label) * 2
        image[row : row + 2, 4:24] = 255
    return images, labels


def write_mnist(directory: Path, train: int, test: int, gz_train: bool, gz_test: bool) -> Path:
    """The four MNIST files in ``directory``; each set raw or .gz as asked."""
    directory.mkdir(parents=True, exist_ok=True)
    for stem, count, seed, gz in (("train", train, 1, gz_train), ("t10k", test, 2, gz_test)):
        images, labels = digit_images(count, seed)
        suffix = ".gz" if gz else ""
        write_idx(directory / f"{stem}-images-idx3-ubyte{suffix}", images)
        write_idx(directory / f"{stem}-labels-idx1-ubyte{suffix}", labels)
    return directory
