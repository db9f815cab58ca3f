"""A generated segmentation dataset: circles, squares and triangles on a noisy background.

Every image is drawn from its own seeded generator (``seed``, index), so the
dataset is identical on every rank and in every run without shipping any file.
Colours are random for every shape, so the network must learn geometry, not colour.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

CLASSES = ["background", "circle", "square", "triangle"]


def _draw(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    image = rng.normal(0.0, 0.15, size=(3, size, size)).astype(np.float32)
    mask = np.zeros((size, size), dtype=np.int64)
    ys, xs = np.mgrid[0:size, 0:size]
    for _ in range(int(rng.integers(1, 4))):
        kind = int(rng.integers(1, len(CLASSES)))
        radius = float(rng.uniform(size * 0.12, size * 0.25))
        cy, cx = rng.uniform(radius, size - radius, size=2)
        if kind == 1:
            inside = (ys - cy) ** 2 + (xs - cx) ** 2 <= radius**2
        elif kind == 2:
            inside = (np.abs(ys - cy) <= radius * 0.85) & (np.abs(xs - cx) <= radius * 0.85)
        else:  # upright triangle: below the apex, above the base, within the widening sides
            top, bottom = cy - radius, cy + radius
            half_width = (ys - top) / (2 * radius) * radius
            inside = (ys >= top) & (ys <= bottom) & (np.abs(xs - cx) <= half_width)
        colour = rng.uniform(-1.0, 1.0, size=3).astype(np.float32)
        colour += np.sign(colour) * 0.3  # keep shapes visible against the noise
        image[:, inside] = colour[:, None] + rng.normal(0.0, 0.1, size=(3, int(inside.sum()))).astype(np.float32)
        mask[inside] = kind  # later shapes cover earlier ones, in the image and in the mask
    return image, mask


class ShapesDataset(Dataset):
    """``length`` images of ``size × size`` pixels with per-pixel class masks."""

    def __init__(self, length: int, size: int = 32, seed: int = 0):
        images, masks = zip(*(_draw(np.random.default_rng([seed, index]), size) for index in range(length)))
        self.images = torch.from_numpy(np.stack(images))
        self.masks = torch.from_numpy(np.stack(masks))

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.masks[index]
