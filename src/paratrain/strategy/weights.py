"""Same weights on every rank: broadcast them, and check them cheaply.

Ranks that start from different weights silently train different models (the classic DDP
tutorial saves rank 0's weights to a file and reloads them everywhere to avoid it).
:func:`broadcast_module` copies rank 0's parameters and buffers to all ranks;
:func:`check_same_weights` compares an exact per-tensor checksum across ranks.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import torch
import torch.distributed as dist

from torch.nn.modules.batchnorm import _BatchNorm

from paratrain import comm
from paratrain.errors import ConfigError, DistributedError
from paratrain.strategy.sync_batchnorm import CPUSyncBatchNorm

_CHUNK = 1 << 22
_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def named_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters then buffers of ``module``, by name (shared tensors once)."""
    return [*module.named_parameters(), *module.named_buffers()]


def replicated_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """What every rank must hold identically during training: parameters and buffers, except
    BatchNorm statistics that each rank updates from its own batch (no SyncBatchNorm)."""
    local_statistics = {
        f"{prefix}.{name}" if prefix else name
        for prefix, layer in module.named_modules()
        if isinstance(layer, _BatchNorm) and not isinstance(layer, (torch.nn.SyncBatchNorm, CPUSyncBatchNorm))
        for name, _ in layer.named_buffers(recurse=False)
    }
    return [(name, tensor) for name, tensor in named_tensors(module) if name not in local_statistics]


def reject_meta(module: torch.nn.Module) -> None:
    """Refuse a module with tensors on the ``meta`` device (no data to train or to broadcast).

    Raises:
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


def check_same_weights(named: Iterable[tuple[str, torch.Tensor]], what: str = "model", step: int | None = None) -> None:
    """Check that every rank holds bit-identical tensors. Collective.

    All ranks must call it together. Costs one pass over the tensors (an exact
    integer checksum each), a 2-integer all-reduce that compares the tensor counts,
    and one all-reduce of ``world_size × tensors × 2`` int64 (each rank fills its row).

    Raises:
        DistributedError: a tensor differs; names the first one, the ranks that
            disagree with rank 0 and ``step`` when given — or says that the ranks
            have different numbers of tensors.
    """
    if not comm.is_initialized() or comm.world_size() == 1:
        return
    named = list(named)
    device = comm._collective_device()
    counts = torch.tensor([len(named), -len(named)], dtype=torch.int64, device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.MAX)
    if int(counts[0]) != -int(counts[1]):
        raise DistributedError(
            f"the {what} has a different number of parameters/buffers per rank (from {-int(counts[1])} to "
            f"{int(counts[0])}); build the same model on every rank"
        )
    table = torch.zeros((comm.world_size(), len(named), 2), dtype=torch.int64, device=device)
    if named:
        table[comm.rank()] = torch.stack([_checksum(t).to(device) for _, t in named])
    dist.all_reduce(table)  # a sum in which each rank contributes only its own row
    differing = (table != table[0]).any(dim=2)  # [rank, tensor]
    if differing.any():
        first = int(differing.any(dim=0).nonzero()[0])
        ranks = [int(r) for r in differing[:, first].nonzero().flatten()]
        count = int(differing.any(dim=0).sum())
        when = f" at step {step}" if step is not None else ""
        raise DistributedError(
            f"{what} weights differ across ranks{when}: {named[first][0]!r} on rank(s) {', '.join(map(str, ranks))} "
            f"differs from rank 0 ({count} tensor(s) differ); set the model up with rt.setup(model) on every rank "
            "(it copies rank 0's weights), and look for weights or buffers changed on some ranks only "
            "(a rank-dependent branch, a non-deterministic op)"
        )


def shard_layouts(named: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """For sharded (DTensor) tensors, what every rank must agree on: global shape, dtype, placements.

    Each entry is a small int64 tensor (a CRC of the description and the element
    count) to compare with :func:`check_same_weights`; the shards themselves differ
    by design.
    """
    layouts = []
    for name, tensor in named:
        placements = getattr(tensor, "placements", None)
        if placements is None:
            continue
        description = repr((tuple(tensor.shape), str(tensor.dtype), tuple(map(str, placements))))
        layouts.append((f"{name} (shard layout)", torch.tensor([zlib.crc32(description.encode()), tensor.numel()])))
    return layouts
