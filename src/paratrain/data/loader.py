"""``make_loader`` / ``rt.loader``: a DataLoader that knows the world size, the epoch and its place.

What DDP tutorials do by hand, and forget: build a DistributedSampler, never pass
``shuffle=True`` beside it, call ``set_epoch`` every epoch, seed workers per rank,
pin memory on CUDA, keep workers alive between epochs, and pad evaluation data so
accuracy changes with the GPU count. The loader here does all of it:

* training (default): :class:`~paratrain.data.sampler.ResumableDistributedSampler`,
  equal steps on every rank (pads like DistributedSampler; ``drop_last=True`` cuts);
* ``exact=True``: :class:`~paratrain.data.exact.ExactShardSampler`, every sample
  once across ranks, for evaluation with :func:`~paratrain.data.gather`;
* ``sampler=…``: the user's sampler, made resumable by skipping consumed indices.

Epochs: every new ``iter(loader)`` is the next epoch, unless the loader was just
created, restored with ``load_state_dict`` or pointed at an epoch with
``set_epoch`` — then that epoch (from its saved position) is used.

**The saved position is what the optimizer has consumed, not what the loader has handed
out.** A training loader of ``rt.loader`` is told by its Runtime when the optimizer steps
(``rt.step``) and when a model ``rt.setup`` returned runs forward: a step has trained the
batches handed out before the model's last forward (all handed out, when no forward was
seen). So a loop that draws its next batch before the step or before the save (nanoGPT
fetches ``X, Y`` between forward and backward; a loop may save at the top of its body)
saves a position before that batch, and the resumed run trains it. Batches prefetched by
workers (``num_workers > 0``) are never counted: only those handed to the loop. A loader
without a Runtime (:func:`make_loader` alone) cannot see steps and counts the batches
handed out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from paratrain import comm
from paratrain.arguments import check_type
from paratrain.data.checks import check_enough_samples, check_request, check_same_length
from paratrain.data.exact import ExactShardSampler
from paratrain.data.global_order import GlobalBatchSampler, Split
from paratrain.data.resumable import ResumableSampler, ResumableWrapper
from paratrain.data.sampler import ResumableDistributedSampler, dataset_length
from paratrain.data.worker_births import BirthWatch, forks_workers
from paratrain.data.batches import move_to
from paratrain.errors import DataError
from paratrain.seeding import rank_seed

_STATE_KEYS = ("epoch", "batches", "batch_size", "sampler")


@dataclass(frozen=True)
class RankPlace:
    """What a loader needs to know about its process: ``rt.loader`` passes the Runtime's.

    Args:
        rank: this process's rank (which shard it reads).
        world_size: processes in the job (how many shards).
        seed: the job's seed: the shuffle order (the same on every rank) and, with the
            rank, the seeds of this rank's loader workers. ``None`` counts as 0.
        device: where the batches go (``move_to_device``): memory is pinned for a CUDA device.
    """

    rank: int
    world_size: int
    seed: int | None = 0
    device: torch.device = torch.device("cpu")


class DistributedLoader:
    """An iterable of batches for this rank, with epochs and a resumable position.

    Behaves like the ``torch.utils.data.DataLoader`` it wraps (``iter``, ``len``,
    ``dataset``, ``batch_size``); the DataLoader itself is ``.dataloader``.
    Build it with :func:`make_loader` or ``rt.loader(...)``.
    """

    def __init__(self, dataloader: DataLoader, sampler: ResumableSampler, worker_seed: int, drop_last: bool,
                 device: torch.device | None = None):
        self.dataloader = dataloader
        self.sampler = sampler
        self.drop_last = drop_last
        #: where each batch is moved before it is handed out (None: left where the DataLoader made it)
        self.device = device
        self._worker_seed = worker_seed
        self._fresh = True  # the next iter() uses sampler.epoch/position as they are
        self._taken = 0  # batches handed out by the current pass
        self._pass_len = 0  # batches the current pass yields in all
        self._started = False
        self._listeners: list[Any] = []
        # What the optimizer has consumed (told by a Runtime; see the module's docstring):
        self._counts_steps = False  # a Runtime reports steps and forwards to this loader
        self._steps_seen = False  # ... and has reported a step
        self._trained = 0  # batches of the current pass trained by an optimizer step
        self._at_forward: int | None = None  # batches handed out when a model last ran, since the last step
        self._warned_untracked = False
        # Forked workers stuck at birth are replaced without changing a batch (see worker_births).
        self._births = BirthWatch(dataloader) if forks_workers(dataloader) else None

    def add_position_listener(self, listener: Any) -> None:
        """Tell ``listener`` where each batch sits in its pass: ``listener.loader_batch(index, total)``
        before a batch is handed out, ``listener.loader_done()`` when the pass ends or the loop leaves it.

        The runtime's gradient accumulation listens to its training loaders, so the
        last batch of an epoch always flushes the accumulated gradients.
        """
        self._listeners.append(listener)

    @property
    def dataset(self) -> Any:
        return self.dataloader.dataset

    @property
    def batch_size(self) -> int:
        return self.dataloader.batch_size

    @property
    def epoch(self) -> int:
        """The epoch of the current pass (or of the next one, before it starts)."""
        return self.sampler.epoch

    @property
    def steps_per_epoch(self) -> int:
        """Batches in a whole epoch on this rank (for schedules: total steps = epochs × this)."""
        return self._batches_for(self.sampler.samples_per_epoch)

    def _batches_for(self, samples: int) -> int:
        return samples // self.batch_size if self.drop_last else math.ceil(samples / self.batch_size)

    # ---- iteration ----------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run ``epoch``.

        Right after ``load_state_dict`` the saved epoch keeps its saved position (so a
        loop that calls ``set_epoch(epoch)`` itself still resumes mid-epoch); any other
        call starts ``epoch`` from its first batch.
        """
        epoch = int(epoch)
        if not (self._fresh and epoch == self.sampler.epoch):
            self.sampler.set_epoch(epoch)
            self.sampler.rewind()
        self._fresh = True

    def __iter__(self) -> Iterator[Any]:
        if not self._fresh:
            self.sampler.set_epoch(self.sampler.epoch + 1)
        self._fresh = False
        # Worker seeds come from this generator (torch draws base_seed from it per
        # iterator; worker i gets base_seed + i): distinct per rank, worker and epoch,
        # and the same in a rerun. Persistent workers keep their first epoch's seeds.
        generator = self.dataloader.generator
        worker_seed = (self._worker_seed + 7919 * self.sampler.epoch) % 2**63

        def new_iterator() -> Iterator[Any]:
            if generator is not None:  # a replacement iterator draws the same worker seeds
                generator.manual_seed(worker_seed)
            return iter(self.dataloader)

        self._pass_len = len(self.dataloader)
        self._taken = 0
        self._trained = 0
        if self._at_forward is not None:
            self._at_forward = 0  # the model last ran before this pass: none of its batches yet
        self._started = True
        return self._count(self._births.iterate(new_iterator) if self._births else new_iterator())

    def _count(self, batches: Iterator[Any]) -> Iterator[Any]:
        try:
            for batch in batches:
                index = self._taken
                self._taken += 1
                for listener in self._listeners:
                    listener.loader_batch(index, self._pass_len)
                yield batch if self.device is None else move_to(batch, self.device)
        finally:
            for listener in self._listeners:
                listener.loader_done()

    def __len__(self) -> int:
        """Batches of the current pass, or of the next one (a resumed epoch yields only its rest)."""
        if self._started and not self._fresh and self._taken >= self._pass_len:
            return self.steps_per_epoch  # this pass is over; the next iter() starts a new epoch
        return len(self.dataloader)

    # ---- what the optimizer consumed (a Runtime tells) -----------------------------------
    def count_trained_batches(self) -> None:
        """From now on, count as consumed only the batches an optimizer step trained, as told
        by :meth:`model_forward` and :meth:`optimizer_stepped` (``rt.loader`` calls this)."""
        self._counts_steps = True

    def model_forward(self) -> None:
        """A model being trained runs forward: on the batches handed out so far."""
        self._at_forward = self._taken

    def optimizer_stepped(self) -> None:
        """The optimizer stepped: the batches handed out before the model's last forward (all
        handed out, when no forward was reported since the last step) are trained."""
        self._steps_seen = True
        trained = self._taken if self._at_forward is None else self._at_forward
        self._trained = max(self._trained, trained)
        self._at_forward = None

    def _consumed(self) -> int:
        """Batches of the current pass that the optimizer has consumed."""
        if not self._counts_steps:
            return self._taken
        untrained = self._taken - self._trained
        if self._steps_seen or untrained <= 1:
            return self._trained
        # Several batches handed out and no rt.step in this process: the loop steps its optimizer
        # itself, so the loader cannot know what was trained; the batches handed out count.
        if not self._warned_untracked and comm.is_main():
            self._warned_untracked = True
            warnings.warn(f"the loader handed out {untrained} batches that no rt.step trained; saving them as "
                          "consumed — step with rt.step(optimizer) so a checkpoint counts only trained batches",
                          stacklevel=3)
        return self._taken

    # ---- state --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Epoch, batches consumed in it, batch size and sampler state (plain ints/bools).

        Consumed means trained by an optimizer step when a Runtime reports the steps (a batch
        drawn and not yet trained is drawn again on resume), else handed out. The same on
        every rank of a training loader (every rank consumes the same number of batches), so
        saving rank 0's copy is enough.
        """
        consumed = self._consumed()
        if self._fresh or not self._started:
            position = self.sampler.position
        elif consumed >= self._pass_len:
            position = self.sampler.num_samples  # the epoch is done: saved as the next one's start
        else:
            position = self.sampler.position + consumed * self.batch_size
        sampler_state = self.sampler.state_dict(position=position)
        return {
            "epoch": sampler_state["epoch"],
            "batches": sampler_state["position"] // self.batch_size,
            "batch_size": self.batch_size,
            "sampler": sampler_state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue where ``state`` left off: the next ``iter()`` yields the rest of its epoch.

        The position is kept in samples, so a different batch size resumes at the same
        sample; a different world size shares the epoch's remaining samples among the
        new ranks.

        Raises:
            DataError: ``state`` is not a loader state, or belongs to another dataset
                or configuration.
        """
        if not isinstance(state, Mapping) or not set(_STATE_KEYS) <= set(state):
            got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise DataError(
                f"loader.load_state_dict got {got}, expected keys {list(_STATE_KEYS)}; pass what loader.state_dict() returned"
            )
        self.sampler.load_state_dict(state["sampler"])
        self._fresh = True
        self._started = False
        self._taken = 0
        self._trained = 0

    def __repr__(self) -> str:
        return f"DistributedLoader({self.sampler!r}, batch_size={self.batch_size}, batches={len(self)})"


def make_loader(
    place: RankPlace | None,
    dataset: Any,
    batch_size: int,
    shuffle: bool = False,
    exact: bool = False,
    num_workers: int = 0,
    drop_last: bool = False,
    collate_fn: Callable[[list[Any]], Any] | None = None,
    sampler: Any = None,
    seed: int | None = None,
    group_by_length: Sequence[int] | None = None,
    global_order: bool = False,
    grad_accum: int = 1,
    move_to_device: bool = True,
    **dataloader_kwargs: Any,
) -> DistributedLoader:
    """Build this rank's loader over ``dataset``. Collective when several ranks run.

    All ranks must call it together: it compares the dataset length across ranks.

    Args:
        place: this process's rank, world size, the job's seed and device (:class:`RankPlace`;
            a :class:`~paratrain.Runtime` has the same attributes), or ``None`` to read rank and
            world size from the process group (seed 0 unless ``seed`` is given, CPU).
        dataset: a map-style dataset (``__getitem__`` and ``__len__``), the same on every rank.
        batch_size: samples per rank per step (the global batch is ``world_size ×`` this).
        shuffle: a new order every epoch, the same across ranks for a given seed.
        exact: evaluation sharding — every sample once, in dataset order, no padding.
        num_workers: loader worker processes per rank (persistent by default).
        drop_last: drop the last incomplete batch, and cut (not pad) the dataset to a
            multiple of the world size.
        collate_fn: passed to DataLoader.
        sampler: your own per-sample sampler (it then does the sharding, if any).
        seed: shuffle seed (same on every rank); defaults to ``place.seed``.
        group_by_length: one length per sample (e.g. token counts): each step's
            batches then hold samples of similar length, so little of the compute goes
            to padding (:mod:`paratrain.data.length_groups`). Training loaders only.
        global_order: the job walks one order in global batches of ``world_size ×
            batch_size × grad_accum`` samples, kept when the run resumes on another number
            of processes (:class:`~paratrain.data.global_loader.GlobalOrderLoader`: the loop
            then steps on ``loader.current.sync`` and weights the loss by
            ``loader.current.loss_weight``). Training loaders only.
        grad_accum: micro-batches per optimizer step, with ``global_order``.
        move_to_device: hand out every batch on ``place.device`` (``rt.device``): each tensor in
            dicts, lists, tuples, namedtuples and dataclasses, non-blocking from pinned memory
            on CUDA; anything else left as it is (:mod:`paratrain.data.batches`). ``False``
            leaves batches where the DataLoader made them (on the CPU), for a loop that moves
            them itself. Nothing to do on a CPU device.
        **dataloader_kwargs: passed to DataLoader, overriding the defaults
            (``pin_memory`` on CUDA, ``persistent_workers`` when ``num_workers > 0``).

    Raises:
        DataError: ``batch_size <= 0``; an IterableDataset; ``shuffle=True`` or
            ``exact=True`` with a sampler; ``exact`` with ``shuffle`` or ``drop_last``;
            fewer training samples than ranks; dataset lengths that differ across ranks;
            ``group_by_length`` with ``exact`` or a sampler, or not one length per sample;
            ``global_order`` with ``exact`` or a sampler, or a ``grad_accum`` that is not a positive int.
    """
    check_request(dataset, batch_size, shuffle, exact, drop_last, sampler,
                  {**dataloader_kwargs, "num_workers": num_workers, "seed": seed})
    if place is None:
        place = RankPlace(comm.rank(), comm.world_size())
    rank, world_size = place.rank, place.world_size
    base_seed = int(seed if seed is not None else place.seed or 0)
    worker_seed = rank_seed(base_seed, rank)
    length = dataset_length(dataset)
    check_same_length(length)

    if group_by_length is not None and (exact or sampler is not None):
        raise DataError(f"group_by_length orders training batches; drop it for {'exact=True' if exact else 'your own sampler'}")
    if global_order and (exact or sampler is not None):
        raise DataError(f"global_order orders training batches; drop it for {'exact=True' if exact else 'your own sampler'}")
    check_type("loader()", "grad_accum", grad_accum, "positive int", error=DataError)
    check_type("loader()", "move_to_device", move_to_device, "bool", error=DataError)
    device = place.device if move_to_device and place.device.type != "cpu" else None
    on_cuda = place.device.type == "cuda"
    options: dict[str, Any] = {
        "pin_memory": on_cuda,  # page-locked host memory makes host→GPU copies asynchronous
        "persistent_workers": num_workers > 0,  # no worker restart (and dataset re-pickling) per epoch
        "generator": torch.Generator(),
        **dataloader_kwargs,
    }
    if global_order:
        from paratrain.data.global_loader import GlobalOrderLoader  # it extends DistributedLoader, defined here

        check_enough_samples(length, world_size, batch_size, drop_last)
        split = Split(world_size, batch_size, grad_accum)
        if drop_last and length < split.global_batch:
            raise DataError(f"drop_last=True drops the short last global batch, and {length} samples hold no full "
                            f"one of {split.global_batch} ({split.describe()}); lower batch_size or grad_accum, "
                            "or set drop_last=False")
        batches = GlobalBatchSampler(length, split, rank, shuffle, base_seed, drop_last, group_by_length)
        dataloader = DataLoader(dataset, batch_sampler=batches, num_workers=num_workers, collate_fn=collate_fn, **options)
        return GlobalOrderLoader(dataloader, batches, worker_seed, drop_last, device)
    if sampler is not None:
        resumable: ResumableSampler = ResumableWrapper(sampler)
    elif exact:
        resumable = ExactShardSampler(length, world_size, rank)
    else:
        check_enough_samples(length, world_size, batch_size, drop_last)
        resumable = ResumableDistributedSampler(length, world_size, rank, shuffle, base_seed, drop_last,
                                                group_by_length=group_by_length, batch_size=batch_size)

    dataloader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=resumable,
        num_workers=num_workers,
        drop_last=drop_last,
        collate_fn=collate_fn,
        **options,
    )
    return DistributedLoader(dataloader, resumable, worker_seed, drop_last, device)
