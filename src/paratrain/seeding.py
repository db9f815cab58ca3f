"""Seeds: the same on every rank for model init, different per rank for data streams.

The classic DDP tutorials seed every rank alike and then sync weights through a file;
paratrain seeds alike (identical init) and *also* broadcasts weights in ``setup``, while data
augmentation and loader workers draw from :func:`rank_seed` so ranks do not feed
the same random crops.

A leaf module: the data layer (loader worker seeds) and the Runtime (``seed=``) both use it.
"""

from __future__ import annotations

import random

import numpy as np
import torch

# A large odd constant keeps per-rank seeds far apart for nearby base seeds.
_RANK_STRIDE = 1_000_003


def seed_everything(seed: int) -> int:
    """Seed Python, NumPy and torch (CPU and all CUDA devices) with ``seed``."""
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


def rank_seed(seed: int, rank: int, worker: int = 0) -> int:
    """A seed unique to (``seed``, ``rank``, ``worker``), stable across runs."""
    return (int(seed) + _RANK_STRIDE * int(rank) + 7919 * int(worker)) % 2**63


def seed_per_rank(seed: int, rank: int) -> int:
    """Seed all generators with :func:`rank_seed` — call after the model is built."""
    return seed_everything(rank_seed(seed, rank))
