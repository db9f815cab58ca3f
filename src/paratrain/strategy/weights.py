"""Same weights on every rank: broadcast them, and check them cheaply.

Ranks that start from different weights silently train different models (seed 000
saves rank 0's weights to a file and reloads them everywhere to avoid it).
:func:`broadcast_module` copies rank 0's parameters and buffers to all ranks;
:func:`check_same_weights` compares an exact per-tensor checksum across ranks.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist

from paratrain import comm
from paratrain.errors import ConfigError, DistributedError

_CHUNK = 1 << 22
_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def named_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters then buffers of ``module``, by name (shared tensors once)."""
    return [*module.named_parameters(), *module.named_buffers()]


def reject_meta(module: torch.nn.Module) -> None:
    """Raises:
    ConfigError: a parameter or buffer has no data yet (meta device).
    """
    for name, tensor in named_tensors(module):
        if tensor.is_meta:
            raise ConfigError(f"{name} is on the meta device; materialise the model (to_empty + init) before setup()")


@torch.no_grad()
def broadcast_module(module: torch.nn.Module, src: int = 0) -> None:
    """Overwrite every parameter and buffer with rank ``src``'s values. Collective.

    All ranks must call it together with the same module structure. A no-op
    without a process group.
    """
    if not comm.is_initialized() or comm.world_size() == 1:
        return
    for _, tensor in named_tensors(module):
        dist.broadcast(tensor.data, src=src)


def _checksum(tensor: torch.Tensor) -> torch.Tensor:
    """Two int64 sums over the tensor's bits: plain, and weighted by position.

    Integer sums are exact and independent of summation order, so equal tensors
    give equal checksums on any device; the position weights catch permutations.
    Chunked so the int64 temporaries stay small next to a large embedding.
    """
    flat = tensor.detach().reshape(-1)
    if flat.is_floating_point() or flat.is_complex():
        flat = flat.view(_INT_VIEW[flat.element_size()])
    total = torch.zeros(2, dtype=torch.int64, device=flat.device)
    for start in range(0, flat.numel(), _CHUNK):
        bits = flat[start : start + _CHUNK].to(torch.int64)
        weights = torch.arange(start, start + bits.numel(), device=bits.device, dtype=torch.int64) % 65521 + 1
        total += torch.stack([bits.sum(), (bits * weights).sum()])
    return total


def check_same_weights(named: Iterable[tuple[str, torch.Tensor]], what: str = "model") -> None:
    """Check that every rank holds bit-identical tensors. Collective.

    All ranks must call it together with tensors of the same names and shapes.
    Costs one pass over the weights and one small all-gather (2 int64 per tensor).

    Raises:
        DistributedError: a tensor differs; names the first one and the ranks that
            disagree with rank 0, or says which ranks have different tensor lists.
    """
    if not comm.is_initialized() or comm.world_size() == 1:
        return
    named = list(named)
    names = [name for name, _ in named]
    local = (
        torch.stack([_checksum(t) for _, t in named]).cpu()
        if named
        else torch.zeros((0, 2), dtype=torch.int64)
    )
    gathered = comm.all_gather(local)
    counts = [len(rows) for rows in gathered]
    if len(set(counts)) > 1:
        raise DistributedError(
            f"the {what} has a different number of parameters/buffers per rank ({counts}); "
            "build the same model on every rank"
        )
    reference = gathered[0]
    differing = (torch.stack(gathered) != reference).any(dim=2)  # [rank, tensor]
    if differing.any():
        first = int(differing.any(dim=0).nonzero()[0])
        ranks = [int(r) for r in differing[:, first].nonzero().flatten()]
        count = int(differing.any(dim=0).sum())
        raise DistributedError(
            f"{what} weights differ across ranks: {names[first]!r} on rank(s) {', '.join(map(str, ranks))} "
            f"differs from rank 0 ({count} tensor(s) differ); call rt.setup(model) on every rank, "
            "which copies rank 0's weights, and do not change weights on one rank only"
        )
