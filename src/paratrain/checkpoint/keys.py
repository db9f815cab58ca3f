"""Model state keys: wrapper prefixes, and what to say when a checkpoint does not fit.

The classic DDP tutorial saves ``model.module.state_dict()`` and must remember the
``.module``; scripts that load them map ``module.`` away by hand. Files written by DDP/DataParallel
(``module.``) or ``torch.compile`` (``_orig_mod.``) are normalised here, so any of
them loads into a wrapped or unwrapped model.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

import torch
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from paratrain.errors import CheckpointError

WRAPPER_PREFIXES = ("module.", "_orig_mod.")
_SHOWN = 4


def strip_wrapper_prefixes(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove ``module.`` / ``_orig_mod.`` (in any nesting) when *every* key carries it.

    Only a prefix shared by all keys is a wrapper's; a model with a real submodule
    called ``module`` keeps its names.
    """
    state = dict(state)
    changed = True
    while changed and state:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if all(key.startswith(prefix) for key in state):
                consume_prefix_in_state_dict_if_present(state, prefix)
                changed = True
    return state


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _listing(names: list[str], shapes: Mapping[str, tuple[int, ...]], others: Mapping[str, tuple[int, ...]], label: str) -> str:
    parts = []
    for name in names[:_SHOWN]:
        text = f"{name} {_shape(shapes[name])}"
        close = difflib.get_close_matches(name, list(others), n=1, cutoff=0.6)
        if close:
            text += f" (closest {label}: {close[0]} {_shape(others[close[0]])})"
        parts.append(text)
    if len(names) > _SHOWN:
        parts.append(f"and {len(names) - _SHOWN} more")
    return ", ".join(parts)


def check_fits(saved: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]], source: str) -> None:
    """Compare saved key → shape with the model's.

    Raises:
        CheckpointError: missing keys, unexpected keys or shape differences, each
            with shapes and the closest name on the other side (difflib).
    """
    missing = sorted(set(expected) - set(saved))
    unexpected = sorted(set(saved) - set(expected))
    wrong = sorted(k for k in set(saved) & set(expected) if tuple(saved[k]) != tuple(expected[k]))
    if not (missing or unexpected or wrong):
        return
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing in the checkpoint: {_listing(missing, expected, saved, 'saved')}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected: {_listing(unexpected, saved, expected, 'in the model')}")
    if wrong:
        shown = ", ".join(f"{k} saved {_shape(saved[k])} vs model {_shape(expected[k])}" for k in wrong[:_SHOWN])
        more = f", and {len(wrong) - _SHOWN} more" if len(wrong) > _SHOWN else ""
        parts.append(f"{len(wrong)} with another shape: {shown}{more}")
    raise CheckpointError(
        f"{source} does not fit this model — {'; '.join(parts)} — build the model the checkpoint was saved "
        "from (same class and options), or export it (paratrain ckpt export) and load the matching keys "
        "with load_state_dict(strict=False)"
    )


def shapes(state: Mapping[str, object]) -> dict[str, tuple[int, ...]]:
    """Key → shape of the tensors in a state dict (global shapes for DTensors)."""
    return {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
