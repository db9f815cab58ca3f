"""Length-grouped order: every step's batches hold samples of similar length.

A batch of text is padded to its longest sample. Drawn at random, a batch of 32 reviews
nearly always holds one of maximal length, so the model computes on padding: in the
``text-cls`` corpus (median 48 characters, cut at 96) random batches are 96 wide on
average, length-grouped ones 55 — half the work per step, the same samples per epoch.

The grouping only reorders an epoch's order (the sampler's reference order), so a
sample is still seen exactly once per epoch and a resumed run continues the same
sequence:

1. cut the epoch's order into *megabatches* of ``MEGABATCH_GROUPS`` global batches;
2. sort each megabatch by length, longest first (stable: ties keep the random order);
3. cut it into *groups* of ``group_size`` = world size × batch size entries — one
   global batch, whose rank-``r`` share ``group[r::world_size]`` is rank ``r``'s batch,
   so all ranks of a step get similar lengths and none waits for a longer one;
4. shuffle the whole groups of the epoch (when the sampler shuffles), keeping a
   shorter last group at the end, where the batch boundaries still line up.

Hugging Face's ``LengthGroupedSampler`` (``group_by_length=True``) sorts the same
way per rank; grouping the *global* batch also keeps the ranks' step times equal.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from paratrain.errors import DataError

#: Global batches per sorted megabatch: large enough that batches are nearly uniform in
#: length, small enough that the epoch's order stays random at that scale (as HF's 50).
MEGABATCH_GROUPS = 50


def check_lengths(lengths: Sequence[int], dataset_len: int) -> list[int]:
    """``lengths`` as a list of ints, one per sample.

    Raises:
        DataError: not one non-negative int per sample of the dataset.
    """
    try:
        values = [int(value) for value in lengths]
    except (TypeError, ValueError):
        raise DataError("group_by_length must be a sequence of per-sample lengths (ints), e.g. token counts") from None
    if len(values) != dataset_len:
        raise DataError(
            f"group_by_length has {len(values)} lengths for a dataset of {dataset_len} samples; give one length per sample"
        )
    if values and min(values) < 0:
        raise DataError(f"group_by_length holds a negative length ({min(values)}); lengths count tokens or items")
    return values


def group_by_length(order: list[int], lengths: Sequence[int], group_size: int, generator: torch.Generator | None) -> list[int]:
    """``order`` reordered so that every ``group_size`` consecutive entries have similar lengths.

    Args:
        order: the epoch's order of sample indices (all ranks').
        lengths: length of every sample of the dataset.
        group_size: entries per step of the whole job (world size × batch size).
        generator: shuffles the groups' order; ``None`` keeps them in megabatch order.
    """
    megabatch = group_size * MEGABATCH_GROUPS
    groups: list[list[int]] = []
    for start in range(0, len(order), megabatch):
        chunk = sorted(order[start : start + megabatch], key=lambda index: -lengths[index])
        groups.extend(chunk[i : i + group_size] for i in range(0, len(chunk), group_size))
    last = groups.pop() if groups and len(groups[-1]) < group_size else None
    if generator is not None:
        groups = [groups[i] for i in torch.randperm(len(groups), generator=generator).tolist()]
    if last is not None:
        groups.append(last)
    return [index for group in groups for index in group]
