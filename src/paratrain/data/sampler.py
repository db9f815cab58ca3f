"""The training sampler: DistributedSampler's order, plus a resumable position in the epoch.

Order of epoch ``e`` (the *reference computation*, identical to
``torch.utils.data.DistributedSampler`` with the same seed, epoch and ``drop_last``;
the tests compare the two):

1. ``order = torch.randperm(n, generator seeded with seed + e)``, or ``range(n)``
   without shuffling — the same on every rank;
2. pad ``order`` by repeating its head up to a multiple of the world size (the
   default, so no sample is dropped), or cut its tail with ``drop_last=True``;
3. rank ``r`` takes ``order[r::world_size]``.

With ``group_by_length`` (per-sample lengths) step 1's order is reordered so that each
step's global batch holds samples of similar length (:mod:`paratrain.data.length_groups`);
the rest is unchanged.

Every rank therefore has the same number of samples and runs the same number of
steps (a rank with one more step would wait forever in the gradient all-reduce).
Padding repeats at most ``world_size - 1`` samples per epoch; evaluation must not
pad — use :class:`~paratrain.data.exact.ExactShardSampler` there (pytorch issue 25162).

What torch's sampler lacks is a place within the epoch: this one restarts a pass at
``position``, so a run resumed after ``k`` steps sees exactly the samples the
uninterrupted run would have seen from step ``k + 1`` on, in the same order.

Resuming with a *different* world size mid-epoch is possible too: the samples
every rank consumed so far are the first ``position * old_world_size`` entries of
``order`` (padding only ever sits at the end), so the new ranks share the rest of
``order`` (``skip`` in the state) for the remainder of that epoch, and the next
epoch is sharded normally.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from paratrain import comm
from paratrain.data.length_groups import check_lengths, group_by_length
from paratrain.data.resumable import ResumableSampler
from paratrain.errors import DataError


def dataset_length(dataset: Any) -> int:
    """``len(dataset)`` (or ``dataset`` itself when it is an int).

    Raises:
        DataError: the dataset has no length.
    """
    if isinstance(dataset, int):
        return dataset
    try:
        return len(dataset)
    except TypeError as exc:
        raise DataError(
            f"{type(dataset).__name__} has no len(); give it __len__ (a map-style dataset) so it can be sharded across ranks"
        ) from exc



def epoch_order(dataset_len: int, shuffle: bool, seed: int, epoch: int, lengths: Sequence[int] | None = None,
                group_size: int = 0) -> list[int]:
    """The whole job's order of ``epoch``: a permutation seeded by ``seed + epoch`` (or 0..n-1), then,
    with ``lengths``, groups of ``group_size`` similar lengths in a shuffled order (a seed of their own)."""
    if shuffle:
        generator = torch.Generator()
        generator.manual_seed(seed + epoch)
        order = torch.randperm(dataset_len, generator=generator).tolist()
    else:
        order = list(range(dataset_len))
    if lengths is not None:
        shuffler = None
        if shuffle:
            shuffler = torch.Generator()
            shuffler.manual_seed(seed + epoch + 1_000_003)  # independent of the permutation's
        order = group_by_length(order, lengths, group_size, shuffler)
    return order


def check_same_order(state: Mapping[str, Any], dataset_len: int, grouped: bool, shuffle: bool, drop_last: bool) -> None:
    """Refuse a saved sampler state whose order this loader cannot continue: another dataset
    length, length grouping on one side only, another ``shuffle`` or ``drop_last``.

    Raises:
        DataError: naming the saved and the current setting, and what to change.
    """
    if int(state["dataset_len"]) != dataset_len:
        raise DataError(
            f"the saved sampler state is for a dataset of {state['dataset_len']} samples, this one has "
            f"{dataset_len}; resume with the same dataset, or start a new run without loading the loader state"
        )
    if bool(state.get("group_size")) != grouped:
        saved = "grouped by length" if state.get("group_size") else "not grouped by length"
        raise DataError(
            f"the saved sampler state is {saved}, this loader is not the same; resume with the same "
            "group_by_length setting (paratrain train: --group-by-length / --no-group-by-length)"
        )
    for key, current in (("shuffle", shuffle), ("drop_last", drop_last)):
        if bool(state[key]) != current:
            raise DataError(
                f"the saved sampler state has {key}={bool(state[key])}, this loader has {key}={current}; "
                f"build the loader with {key}={bool(state[key])} to resume"
            )

class ResumableDistributedSampler(ResumableSampler):
    """Shuffled (or sequential) shard of the dataset for this rank, resumable mid-epoch.

    Args:
        dataset: a sized dataset, or its length.
        num_replicas: world size; defaults to the process group's (1 without one).
        rank: this process's rank; defaults to the process group's (0 without one).
        shuffle: a new permutation every epoch (seeded with ``seed + epoch``).
        seed: must be the same on every rank.
        drop_last: cut the tail to a multiple of the world size instead of padding.
        group_by_length: one length per sample; each step's batches then hold samples
            of similar length (less padding). Needs ``batch_size``.
        batch_size: samples per rank per step (only used to group by length).

    Raises:
        DataError: ``rank`` is outside ``[0, num_replicas)``; lengths that are not one
            non-negative int per sample.
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        group_by_length: Sequence[int] | None = None,
        batch_size: int = 1,
    ):
        super().__init__()
        self.dataset_len = dataset_length(dataset)
        self.num_replicas = comm.world_size() if num_replicas is None else int(num_replicas)
        self.rank = comm.rank() if rank is None else int(rank)
        if not 0 <= self.rank < self.num_replicas:
            raise DataError(f"rank {self.rank} is outside [0, {self.num_replicas}); pass rank < num_replicas")
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        # Entries of this epoch's global order consumed under an earlier world size.
        self.skip = 0
        self.lengths = None if group_by_length is None else check_lengths(group_by_length, self.dataset_len)
        # Entries per length group: one global batch. An epoch resumed under another world
        # size keeps the saved run's grouping, or its consumed entries would not be a prefix.
        self.batch_size = int(batch_size)
        self.group_size = self._fresh_group_size()

    def _fresh_group_size(self) -> int:
        return self.num_replicas * self.batch_size if self.lengths is not None else 0

    def _on_new_epoch(self) -> None:
        self.skip = 0
        self.group_size = self._fresh_group_size()

    def global_order(self) -> list[int]:
        """This epoch's order for all ranks after ``skip``, padded or cut to a multiple of the world size."""
        order = epoch_order(self.dataset_len, self.shuffle, self.seed, self.epoch, self.lengths, self.group_size)
        rest = order[self.skip :]
        if self.drop_last:
            return rest[: len(rest) - len(rest) % self.num_replicas]
        padding = -len(rest) % self.num_replicas
        if rest and padding:
            rest += (rest * math.ceil(padding / len(rest)))[:padding]
        return rest

    def epoch_indices(self) -> list[int]:
        return self.global_order()[self.rank :: self.num_replicas]

    def _share(self, count: int) -> int:
        """Samples per rank when ``count`` samples are sharded (padded up or cut down)."""
        return count // self.num_replicas if self.drop_last else math.ceil(count / self.num_replicas)

    @property
    def num_samples(self) -> int:
        return self._share(max(self.dataset_len - self.skip, 0))

    @property
    def samples_per_epoch(self) -> int:
        return self._share(self.dataset_len)

    # ---- state --------------------------------------------------------------------------
    def _config_state(self) -> dict[str, Any]:
        return {
            "skip": self.skip,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "world_size": self.num_replicas,
            "dataset_len": self.dataset_len,
            "num_samples": self.num_samples,
            "group_size": self.group_size,
        }

    def _state_defaults(self) -> dict[str, Any]:
        return {"group_size": 0}  # states saved before length grouping existed

    def _next_epoch_state(self) -> dict[str, Any]:
        return {**super()._next_epoch_state(), "skip": 0, "num_samples": self.samples_per_epoch,
                "group_size": self._fresh_group_size()}

    def _check_config(self, state: Mapping[str, Any]) -> None:
        check_same_order(state, self.dataset_len, self.lengths is not None, self.shuffle, self.drop_last)

    def _restore(self, state: Mapping[str, Any]) -> None:
        # The saved seed wins: the resumed epoch must have the saved run's order.
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.group_size = int(state["group_size"])
        saved_world = int(state["world_size"])
        if saved_world == self.num_replicas:
            self.skip = int(state["skip"])
            self.position = int(state["position"])
        else:
            # Every rank had consumed `position` samples, i.e. the first position * saved_world
            # entries of the order (padding sits only at its end): the new ranks share the rest.
            consumed = int(state["skip"]) + int(state["position"]) * saved_world
            self.skip = min(consumed, self.dataset_len)
            self.position = 0

    def __repr__(self) -> str:
        return (
            f"ResumableDistributedSampler(n={self.dataset_len}, rank={self.rank}/{self.num_replicas}, "
            f"shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch}, position={self.position})"
        )
