"""One order and one global batch for the whole job, whatever its world size.

The training sampler of :mod:`paratrain.data.sampler` gives each rank a shard of the
epoch; its order and its global batch (``world_size × batch_size``) depend on the
world size, so a run resumed on more or fewer processes trains on other batches.
Here the *job* walks one order and the ranks of the moment share each step:

1. the epoch's order: ``torch.randperm(n)`` seeded with ``seed + epoch`` (or
   ``range(n)``), reordered by length groups of one global batch when lengths are given
   (:mod:`paratrain.data.length_groups`) — the same order the per-rank sampler walks;
2. global batch ``i`` is ``order[i·g : (i+1)·g]``, with ``g`` fixed for the whole run
   (``world_size × micro_batch × accumulation`` when the run starts, then saved);
3. the ``W`` ranks of the moment split it into ``W × A`` micro-batches of at most ``m``
   samples (``g = W × m × A``): entry ``j`` of the global batch goes to slot
   ``j mod (W·A)``, slot ``a·W + r`` being rank ``r``'s micro-step ``a``.

Every full global batch then splits evenly and its gradient — DDP's mean over ranks of
the accumulated mean over micro-batches — is the mean over its ``g`` samples, the same
sum in another order. The last global batch of an epoch may hold fewer samples
(``L < g``, unless ``drop_last``): it takes ``ceil(L / (W·m))`` micro-steps, the slots
differ by at most one sample, and each micro-batch's loss is weighted by
``samples × W × micro_steps / L`` (:attr:`MicroBatch.loss_weight`), so the gradient is
again the mean over the ``L`` samples. A slot left empty (fewer samples than slots) runs
one repeated sample with weight 0: every rank takes the same number of micro-steps, or
one would wait forever in the all-reduce.

The weights count samples: exact for a loss that is a mean over samples (every built-in task's).
A loss averaged over tokens, whose count differs between samples, would need its token counts
summed over the global batch first; that is not done here.

What still differs between world sizes: floating-point rounding (sums in another
order; about 1e-7 relative per step in fp32), random streams drawn per rank (dropout)
and per-micro-batch statistics (BatchNorm without SyncBatchNorm sees another batch).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import Sampler

from paratrain.arguments import option
from paratrain.data.length_groups import check_lengths
from paratrain.data.sampler import check_same_order, epoch_order
from paratrain.errors import DataError


@dataclasses.dataclass(frozen=True)
class Split:
    """How the ranks of the moment share one global batch: ``world_size × micro_batch × accumulation``."""

    world_size: int
    micro_batch: int
    accumulation: int

    @property
    def global_batch(self) -> int:
        return self.world_size * self.micro_batch * self.accumulation

    def describe(self) -> str:
        return f"{self.world_size} process(es) × batch {self.micro_batch} × accumulation {self.accumulation}"


def choose_split(global_batch: int, world_size: int, max_micro_batch: int) -> Split:
    """The split of ``global_batch`` over ``world_size`` ranks with the largest micro-batch
    of at most ``max_micro_batch`` samples (the fewest accumulation steps).

    Raises:
        DataError: ``world_size`` does not divide ``global_batch``; names the world sizes that do.
    """
    if global_batch % world_size:
        choices = [w for w in range(1, global_batch + 1) if global_batch % w == 0]
        shown = ", ".join(map(str, choices[:12])) + (", ..." if len(choices) > 12 else "")
        raise DataError(
            f"the run's global batch of {global_batch} samples cannot be split over {world_size} processes "
            f"(every process must take the same number of samples per step); run on {shown} process(es), "
            f"or start a new run ({option('fresh', True)})"
        )
    per_rank = global_batch // world_size
    micro = max(d for d in range(1, min(max_micro_batch, per_rank) + 1) if per_rank % d == 0)
    return Split(world_size, micro, per_rank // micro)


@dataclasses.dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of this rank and its place in its global batch."""

    indices: list[int]
    samples: int  # real samples (0 for a slot that repeats a sample only to keep step with the others)
    loss_weight: float  # multiply the micro-batch's mean loss by this: the step's gradient is the global mean
    micro_steps: int  # micro-steps of this global batch on every rank
    sync: bool  # the last micro-step of its global batch: synchronise and step
    step_samples: int  # samples of the whole global batch, all ranks together


def split_global_batch(batch: Sequence[int], split: Split, rank: int) -> list[MicroBatch]:
    """Rank ``rank``'s micro-batches of one global batch (any size up to ``split.global_batch``)."""
    world, total = split.world_size, len(batch)
    micro_steps = max(1, math.ceil(total / (world * split.micro_batch)))
    slots = world * micro_steps
    result = []
    for step in range(micro_steps):
        indices = list(batch[step * world + rank :: slots])
        samples = len(indices)
        weight = samples * slots / total if samples else 0.0
        if not indices:
            indices = [batch[0]]  # runs, weighted 0: all ranks take the same micro-steps
        result.append(MicroBatch(indices, samples, weight, micro_steps, step + 1 == micro_steps, total))
    return result


class GlobalBatchSampler(Sampler[list[int]]):
    """This rank's micro-batches of the job's global order; resumable at a global batch.

    A batch sampler (``DataLoader(batch_sampler=...)``). ``position`` counts the global
    batches of the current epoch already trained; each pass starts there.

    Args:
        dataset_len: samples in the dataset.
        split: this run's split (its global batch is kept across world sizes).
        rank: this process's rank, in ``[0, split.world_size)``.
        shuffle, seed, drop_last: as the per-rank sampler's (``drop_last`` drops a short
            last global batch).
        group_by_length: one length per sample: global batches of similar lengths.

    Raises:
        DataError: a rank outside the world, or lengths that are not one int per sample.
    """

    def __init__(self, dataset_len: int, split: Split, rank: int, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, group_by_length: Sequence[int] | None = None):
        if not 0 <= rank < split.world_size:
            raise DataError(f"rank {rank} is outside [0, {split.world_size}); pass rank < world_size")
        self.dataset_len = int(dataset_len)
        self.split = split
        self.rank = int(rank)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.lengths = None if group_by_length is None else check_lengths(group_by_length, self.dataset_len)
        self.epoch = 0
        self.position = 0
        # Length groups of the current epoch: one global batch, or what an older run saved.
        self.group_size = self.split.global_batch
        self.plan: list[MicroBatch] = []  # the running pass's micro-batches

    @property
    def global_batch(self) -> int:
        return self.split.global_batch

    @property
    def num_replicas(self) -> int:
        """The ranks sharing each global batch (the name torch's DistributedSampler gives it)."""
        return self.split.world_size

    # ---- the order --------------------------------------------------------------------------
    def epoch_order(self) -> list[int]:
        """The whole job's order of the current epoch (all ranks')."""
        # The per-rank sampler's order, so a run keeps its data order when it switches to this one.
        return epoch_order(self.dataset_len, self.shuffle, self.seed, self.epoch, self.lengths, self.group_size)

    @property
    def batches_per_epoch(self) -> int:
        """Global batches (optimizer steps) in a whole epoch."""
        full, rest = divmod(self.dataset_len, self.global_batch)
        return full + (1 if rest and not self.drop_last else 0)

    def _micro_steps(self, samples: int) -> int:
        return max(1, math.ceil(samples / (self.split.world_size * self.split.micro_batch)))

    def micro_batches_from(self, position: int) -> int:
        """This rank's micro-batches from global batch ``position`` to the epoch's end."""
        remaining = max(self.batches_per_epoch - position, 0)
        if not remaining:
            return 0
        last = min(self.global_batch, self.dataset_len - (self.batches_per_epoch - 1) * self.global_batch)
        return (remaining - 1) * self.split.accumulation + self._micro_steps(last)

    def steps_in(self, micro_batches: int) -> int:
        """Whole global batches in the first ``micro_batches`` of a pass (a partial one is not counted)."""
        return sum(1 for micro in self.plan[:micro_batches] if micro.sync)

    # ---- the batch-sampler protocol ---------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass; another epoch starts at its first global batch."""
        epoch = int(epoch)
        if epoch != self.epoch:
            self.position = 0
            self.group_size = self.split.global_batch
        self.epoch = epoch

    def rewind(self) -> None:
        """Start the current epoch again from its first global batch (grouped as a fresh epoch)."""
        self.position = 0
        self.group_size = self.split.global_batch

    def __iter__(self) -> Iterator[list[int]]:
        order, g = self.epoch_order(), self.global_batch
        plan: list[MicroBatch] = []
        for index in range(self.position, self.batches_per_epoch):
            plan.extend(split_global_batch(order[index * g : (index + 1) * g], self.split, self.rank))
        self.plan = plan
        return iter([micro.indices for micro in plan])

    def __len__(self) -> int:
        return self.micro_batches_from(self.position)

    # ---- state ------------------------------------------------------------------------------
    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        """Epoch, global batches trained in it, and the run's global batch (plain ints/bools);
        a finished epoch is saved as the start of the next."""
        position = self.position if position is None else int(position)
        epoch = self.epoch
        if position >= self.batches_per_epoch:
            epoch, position = epoch + 1, 0
        return {
            "global_order": True, "epoch": epoch, "position": position, "global_batch": self.global_batch,
            "seed": self.seed, "shuffle": self.shuffle, "drop_last": self.drop_last,
            "dataset_len": self.dataset_len, "world_size": self.split.world_size,
            "micro_batch": self.split.micro_batch, "accumulation": self.split.accumulation,
            # An epoch resumed mid-way keeps the grouping it started with (else its trained part
            # would not be a prefix of the order); 0: not grouped by length.
            "group_size": (self.group_size if position else self.global_batch) if self.lengths is not None else 0,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> str | None:
        """Continue from ``state``; return a line saying how the global batch is now split
        when it is split otherwise than when saved (another world size; else None).

        A state of the per-rank sampler (a checkpoint from before the global order) continues
        at the global batch that holds the samples its ranks had consumed.

        Raises:
            DataError: a state of another dataset or configuration, or a global batch that
                the current world size cannot split.
        """
        self._check(state)
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        if not state.get("global_order"):
            # Its ranks had consumed the first skip + position × world entries of the same order.
            consumed = int(state.get("skip", 0)) + int(state["position"]) * int(state["world_size"])
            self.group_size = int(state.get("group_size") or self.split.global_batch)
            self.position = consumed // self.global_batch
            return None
        saved = int(state["global_batch"])
        self.position = int(state["position"])
        self.group_size = int(state.get("group_size") or saved)
        if saved != self.global_batch:
            self.split = choose_split(saved, self.split.world_size, self.split.micro_batch)
        saved_split = Split(int(state["world_size"]), int(state["micro_batch"]), int(state["accumulation"]))
        note = None
        if saved_split != self.split:  # another world size, or a split asked for explicitly
            note = (f"the run's global batch of {saved} samples is kept ({saved_split.describe()} when saved): "
                    f"now {self.split.describe()}, the same trajectory")
        if not self.position:
            self.group_size = self.global_batch
        return note

    def _check(self, state: Mapping[str, Any]) -> None:
        expected = {"epoch", "position", "seed", "shuffle", "drop_last", "dataset_len", "world_size"}
        if not isinstance(state, Mapping) or not expected <= set(state):
            got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise DataError(f"GlobalBatchSampler.load_state_dict got {got}, expected keys {sorted(expected)}; "
                            "pass what loader.state_dict() returned")
        check_same_order(state, self.dataset_len, self.lengths is not None, self.shuffle, self.drop_last)

    def __repr__(self) -> str:
        return (f"GlobalBatchSampler(n={self.dataset_len}, global_batch={self.global_batch} = {self.split.describe()}, "
                f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch}, position={self.position})")
