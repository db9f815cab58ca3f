"""Refuse loader requests that would fail later, silently mislead, or hang.

Each check raises :class:`~paratrain.errors.DataError` with one line that names the
problem and the fix, before any DataLoader exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.utils.data import IterableDataset

from paratrain import comm
from paratrain.arguments import check_type
from paratrain.errors import DataError


def check_request(
    dataset: Any, batch_size: Any, shuffle: bool, exact: bool, drop_last: bool, sampler: Any, options: Mapping[str, Any]
) -> None:
    """Validate the arguments of ``make_loader`` (local, no communication).

    Raises:
        DataError: bad batch size, a flag that is not a bool (``shuffle="no"``), a bad
            ``num_workers``/``seed``, an IterableDataset, or a contradictory combination.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise DataError(f"batch_size must be a positive integer (samples per rank per step), got {batch_size!r}")
    for name, value in (("shuffle", shuffle), ("exact", exact), ("drop_last", drop_last)):
        check_type("loader()", name, value, "bool", error=DataError)
    check_type("loader()", "num_workers", options.get("num_workers", 0), "int >= 0", error=DataError)
    check_type("loader()", "seed", options.get("seed"), "int", allow_none=True, error=DataError)
    if isinstance(dataset, IterableDataset):
        # Sharding a stream by rank gives each rank an unknown, usually unequal number of
        # batches: one rank takes an extra step and waits forever in the all-reduce.
        raise DataError(
            f"{type(dataset).__name__} is an IterableDataset, which paratrain cannot shard evenly or resume; "
            "give it __getitem__ and __len__ (map-style), or shard it yourself in __iter__ by pt.rank()/pt.world_size() "
            "and torch.utils.data.get_worker_info(), with the same number of items on every rank, and use torch's DataLoader"
        )
    if sampler is not None and shuffle:
        raise DataError("shuffle=True and a sampler were both given; drop shuffle=True (the sampler decides the order)")
    if sampler is not None and exact:
        raise DataError("exact=True and a sampler were both given; drop the sampler (exact=True shards the dataset itself)")
    if exact and shuffle:
        raise DataError("exact=True keeps dataset order so results can be gathered in order; drop shuffle=True")
    if exact and drop_last:
        raise DataError("exact=True counts every sample once and drop_last=True would drop some; drop drop_last=True")
    if "batch_sampler" in options:  # options: the DataLoader's, plus num_workers and seed
        raise DataError("batch_sampler cannot be resumed or sharded here; pass a per-sample sampler= and batch_size= instead")


def check_same_length(length: int) -> None:
    """Fail on every rank when ranks built datasets of different lengths. Collective.

    All ranks must call it together. Unequal lengths would give ranks unequal numbers
    of steps, and the rank that runs out first leaves the others waiting in a
    collective until the timeout.

    Raises:
        DataError: naming each rank's length.
    """
    lengths = comm.all_gather_object(int(length))
    if len(set(lengths)) > 1:
        listing = ", ".join(f"rank {r}: {n}" for r, n in enumerate(lengths))
        raise DataError(
            f"dataset length differs across ranks ({listing}); every rank must build the same dataset "
            "(same files, split and filtering, e.g. no per-rank randomness before the split)"
        )


def check_enough_samples(length: int, world_size: int, batch_size: int, drop_last: bool) -> None:
    """A training loader needs at least one sample per rank (one full batch with ``drop_last``).

    Raises:
        DataError: fewer samples than ranks, an empty dataset, or no full batch to keep.
    """
    if length == 0:
        raise DataError("the dataset is empty; check the path, split or filter that built it")
    if length < world_size:
        raise DataError(
            f"the training dataset has {length} sample(s) for {world_size} ranks, but every rank needs at least one "
            f"to take the same number of steps; run at most {length} process(es) or use more data "
            "(exact=True evaluation works with any size)"
        )
    per_rank = length // world_size
    if drop_last and per_rank < batch_size:
        raise DataError(
            f"drop_last=True with batch_size {batch_size} leaves no full batch ({per_rank} sample(s) per rank on "
            f"{world_size} ranks); lower batch_size to at most {per_rank} or set drop_last=False"
        )
