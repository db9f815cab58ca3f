"""Exact evaluation sharding: every sample exactly once across ranks, no padding.

torch's DistributedSampler pads the dataset to a multiple of the world size, so a
2-GPU validation run counts a few samples twice and its accuracy differs from a
1-GPU run (pytorch issue 25162). Here rank ``r`` gets one *contiguous* block of the
dataset; blocks differ in size by at most one (the first ``n % world_size`` ranks
get the extra sample) and may be empty when there are fewer samples than ranks.
Because blocks are contiguous and in rank order, concatenating the ranks' outputs
in rank order (:func:`paratrain.data.gather`) restores dataset order.

Shards of unequal size mean unequal numbers of batches per rank: fine for a forward
pass under ``torch.no_grad()``, but a forward that itself communicates (FSDP
all-gathers parameters) needs every rank to run the same number of forwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paratrain import comm
from paratrain.data.resumable import ResumableSampler
from paratrain.data.sampler import dataset_length
from paratrain.errors import DataError


def shard_bounds(dataset_len: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(start, stop)`` of rank ``rank``'s contiguous block of ``range(dataset_len)``.

    Raises:
        DataError: ``rank`` is outside ``[0, world_size)`` or the length is negative.
    """
    if not 0 <= rank < world_size:
        raise DataError(f"rank {rank} is outside [0, {world_size}); pass rank < world_size")
    if dataset_len < 0:
        raise DataError(f"dataset length {dataset_len} is negative")
    base, extra = divmod(dataset_len, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class ExactShardSampler(ResumableSampler):
    """This rank's contiguous block of the dataset, in dataset order, never padded.

    Args:
        dataset: a sized dataset, or its length.
        num_replicas: world size; defaults to the process group's (1 without one).
        rank: this process's rank; defaults to the process group's (0 without one).

    Raises:
        DataError: ``rank`` is outside ``[0, num_replicas)``.
    """

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None):
        super().__init__()
        self.dataset_len = dataset_length(dataset)
        self.num_replicas = comm.world_size() if num_replicas is None else int(num_replicas)
        self.rank = comm.rank() if rank is None else int(rank)
        self.start, self.stop = shard_bounds(self.dataset_len, self.num_replicas, self.rank)

    def epoch_indices(self) -> list[int]:
        return list(range(self.start, self.stop))

    @property
    def num_samples(self) -> int:
        return self.stop - self.start

    def _config_state(self) -> dict[str, Any]:
        return {"world_size": self.num_replicas, "dataset_len": self.dataset_len}

    def _check_config(self, state: Mapping[str, Any]) -> None:
        if int(state["dataset_len"]) != self.dataset_len:
            raise DataError(
                f"the saved evaluation sampler state is for {state['dataset_len']} samples, this dataset has "
                f"{self.dataset_len}; load it into a loader over the same dataset"
            )

    def _restore(self, state: Mapping[str, Any]) -> None:
        super()._restore(state)
        if int(state["world_size"]) != self.num_replicas:
            # Blocks moved with the world size; an evaluation pass is cheap to redo from its start.
            self.position = 0

    def __repr__(self) -> str:
        return f"ExactShardSampler(n={self.dataset_len}, rank={self.rank}/{self.num_replicas}, block=[{self.start}, {self.stop}))"
