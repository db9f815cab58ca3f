"""One order per epoch, walked by whoever is alive: the data of fault-tolerant replica groups.

Replica groups come and go between steps (``strategy="ft-ddp"``), so no group may own a shard
of the epoch. The job walks one order instead:

1. the epoch's order is :func:`~paratrain.data.sampler.epoch_order` (``torch.randperm(n)``
   seeded with ``seed + epoch``), the same on every group;
2. a *cursor* counts the samples of the epoch whose step committed; the next step trains
   ``order[cursor : cursor + global_batch]`` (the last one of an epoch may be shorter);
3. the ``P`` processes taking part in that step (``W`` groups of ``K``: ``P = W·K``) split it
   into ``P`` contiguous parts whose sizes differ by at most one; the process of part ``r``
   (rank ``k`` of the ``w``-th group: ``r = w·K + k``) trains it, its loss weighted by
   ``part × P / slice`` so that the mean over processes of the gradients is the slice's mean.
   A part of no sample (a slice shorter than ``P``: the last of an epoch) trains the slice's
   first sample with weight 0, so that every process runs the same forward and backward;
4. the cursor moves only when the step commits. A dropped step (a group died inside it)
   leaves the cursor where it was: the next step trains the same slice, split over the
   groups of that moment.

The cursor is part of the state a healing group receives with the weights, and of every disk
checkpoint, so no sample of an epoch is skipped or trained twice, whatever fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paratrain.arguments import option
from paratrain.data.sampler import epoch_order
from paratrain.errors import DataError


class CommittedSlices:
    """The cursor of committed samples over one seeded order per epoch.

    Args:
        dataset_len: samples in the dataset (every group must see the same).
        global_batch: samples per step over all groups, fixed for the run.
        seed: the orders' seed (epoch ``e`` is seeded with ``seed + e``).
        shuffle: False walks ``0 … n-1`` every epoch.

    Raises:
        DataError: an empty dataset or a ``global_batch`` below 1.
    """

    def __init__(self, dataset_len: int, global_batch: int, seed: int = 0, shuffle: bool = True):
        if dataset_len < 1:
            raise DataError("the training dataset is empty; fault-tolerant training needs at least one sample")
        if global_batch < 1:
            raise DataError(f"{option('batch_size')} must be at least 1, got {global_batch}")
        self.dataset_len, self.global_batch, self.seed, self.shuffle = dataset_len, global_batch, seed, shuffle
        self.epoch = 0
        self.cursor = 0  # samples of this epoch whose step committed
        self._order: list[int] | None = None
        self._order_epoch = -1

    def order(self) -> list[int]:
        """This epoch's order (cached)."""
        if self._order_epoch != self.epoch:
            self._order = epoch_order(self.dataset_len, self.shuffle, self.seed, self.epoch)
            self._order_epoch = self.epoch
        return self._order

    @property
    def epoch_done(self) -> bool:
        return self.cursor >= self.dataset_len

    def next_slice(self) -> list[int]:
        """The samples of the next step: ``order[cursor : cursor + global_batch]``."""
        return self.order()[self.cursor:self.cursor + self.global_batch]

    def part(self, rank: int, world_size: int) -> tuple[list[int], float]:
        """Part ``rank`` of ``world_size`` of the next slice (contiguous), and its loss weight
        ``part × world_size / slice`` (1.0 when the slice splits evenly; 0.0 with the slice's first
        sample for a part of none).

        Raises:
            DataError: ``rank`` outside ``0 … world_size - 1``.
        """
        if not 0 <= rank < world_size:
            raise DataError(f"part {rank} is outside the {world_size} parts of this step")
        whole = self.next_slice()
        base, extra = divmod(len(whole), world_size)
        start = rank * base + min(rank, extra)
        size = base + (1 if rank < extra else 0)
        if size == 0:
            return whole[:1], 0.0
        return whole[start:start + size], size * world_size / len(whole)

    def commit(self) -> None:
        """The step that trained :meth:`next_slice` committed: move the cursor past it."""
        self.cursor = min(self.dataset_len, self.cursor + self.global_batch)

    def next_epoch(self) -> None:
        self.epoch += 1
        self.cursor = 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "cursor": self.cursor, "dataset_len": self.dataset_len,
                "global_batch": self.global_batch, "seed": self.seed, "shuffle": self.shuffle}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raises:
        DataError: the state walks another order (dataset length, seed, shuffle) or global batch.
        """
        for key in ("dataset_len", "global_batch", "seed", "shuffle"):
            if state[key] != getattr(self, key):
                raise DataError(f"the saved data cursor has {key}={state[key]!r}, this loader {getattr(self, key)!r}; "
                                f"resume with the same {key} (the order and the global batch are fixed for a run)")
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])
