"""Random generator states of one process, as plain data.

A resumed run draws the same dropout masks and augmentations as an uninterrupted
one only if every generator continues where it stopped: Python's ``random``,
NumPy's global generator, torch's CPU generator and each CUDA device's. Each rank
has its own states (data streams are seeded per rank), so all are saved and each
rank restores its own.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch


def capture() -> dict[str, Any]:
    """This process's generator states (tensors, ints and tuples: ``weights_only`` loadable)."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        # Python's 625 ints as one tensor, as NumPy's keys: a tuple of them is 625 objects to pickle (and to
        # check) at every save, in the writing thread that shares the interpreter with training
        "python": (version, torch.tensor(internal, dtype=torch.int64), gauss),
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
        "cuda": [],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
        state["cuda_device"] = torch.cuda.current_device()  # the one this rank computes on
    return state


def restore(state: dict[str, Any]) -> None:
    """Put the generators back to :func:`capture`'s ``state``."""
    version, internal, gauss = state["python"]  # internal: a tensor, or a tuple in older checkpoints
    random.setstate((version, tuple(internal.tolist() if isinstance(internal, torch.Tensor) else internal), gauss))
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["position"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    cuda_states = state.get("cuda") or []
    if not cuda_states or not torch.cuda.is_available():
        return
    if len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
        return
    # Another number of visible GPUs than at the save (CUDA_VISIBLE_DEVICES, another machine): this
    # rank's own device continues its generator; a resume that is not bit-exact says so.
    saved_device = int(state.get("cuda_device", 0))
    torch.cuda.set_rng_state(cuda_states[saved_device] if saved_device < len(cuda_states) else cuda_states[0],
                             torch.cuda.current_device())
    warnings.warn(
        f"the checkpoint holds the random generators of {len(cuda_states)} GPU(s) and this process sees "
        f"{torch.cuda.device_count()}: only this rank's GPU generator continues; dropout and other random draws "
        "on the other GPUs start afresh, so the resumed run is not bit-identical to an uninterrupted one",
        stacklevel=2,
    )
