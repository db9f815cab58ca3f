"""``rt.loader(..., global_order=True)``: the job's global batches, split over the ranks of the moment.

A :class:`GlobalOrderLoader` yields this rank's micro-batches of the job's global order
(:mod:`paratrain.data.global_order`). Its global batch ``g`` is fixed when the run starts
(``world_size × batch_size × grad_accum``) and saved; resumed on another number of
processes it keeps ``g``, re-splits it (``batch_size`` is then the largest micro-batch
up to the one asked for, ``accumulation`` what makes up the rest) and says so in one
line, so the run continues on the same trajectory. A loop built on it reads each
micro-batch's place from :attr:`GlobalOrderLoader.current`::

    train = rt.loader(train_ds, batch_size=8, shuffle=True, global_order=True)
    for batch in train:
        micro = train.current
        with rt.accumulate(model, steps=micro.micro_steps, sync=micro.sync):
            rt.backward(model(**batch).loss * micro.loss_weight)  # the global-batch mean
            rt.step(opt)

``pt.fit`` (and ``paratrain train``) always trains this way. In your own loop it is
opt-in, because it asks the loop for two things the per-rank loader does not: step
when ``current.sync`` says so (the accumulation count may change on resume), and weight
the loss by ``current.loss_weight`` (1.0 except in an epoch's short last global batch).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from paratrain import comm
from paratrain.data.global_order import GlobalBatchSampler, MicroBatch
from paratrain.data.loader import _STATE_KEYS, DistributedLoader
from paratrain.errors import DataError


class ElasticResumeWarning(UserWarning):
    """A run resumed on another number of processes: how its global batch is split now."""


class GlobalOrderLoader(DistributedLoader):
    """This rank's micro-batches of the job's global batches; resumable at any world size.

    Build it with ``rt.loader(..., global_order=True)`` (or ``make_loader``). ``len()``
    and ``steps_per_epoch`` count this rank's micro-batches, as the per-rank loader's do;
    :attr:`global_batches_per_epoch` counts optimizer steps.
    """

    sampler: GlobalBatchSampler

    def __init__(self, dataloader: Any, sampler: GlobalBatchSampler, worker_seed: int, drop_last: bool,
                 device: Any = None):
        super().__init__(dataloader, sampler, worker_seed, drop_last, device)
        #: The micro-batch last handed out, with its loss weight and whether it steps.
        self.current: MicroBatch | None = None
        #: False after loading a checkpoint of the per-rank order (older runs): its world size
        #: decided the batches before, so a changed one does not continue the same trajectory.
        self.keeps_trajectory = True

    @property
    def batch_size(self) -> int:
        """Samples per micro-batch on this rank (the last global batch of an epoch may hold fewer)."""
        return self.sampler.split.micro_batch

    @property
    def accumulation(self) -> int:
        """Micro-batches per optimizer step (one global batch)."""
        return self.sampler.split.accumulation

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step, all ranks together; fixed for the run."""
        return self.sampler.global_batch

    @property
    def global_batches_per_epoch(self) -> int:
        """Optimizer steps in a whole epoch, the same at any world size."""
        return self.sampler.batches_per_epoch

    @property
    def steps_per_epoch(self) -> int:
        return self.sampler.micro_batches_from(0)

    def _count(self, batches: Iterator[Any]) -> Iterator[Any]:
        counted = super()._count(batches)
        try:
            for batch in counted:
                self.current = self.sampler.plan[self._taken - 1]
                yield batch
        finally:
            counted.close()

    # ---- state --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Epoch, global batches trained in it and the run's global batch (plain ints/bools).

        The same on every rank. Consumed micro-batches count as for the per-rank loader (trained
        by an optimizer step, when a Runtime reports them). A global batch whose micro-batches
        are only partly done is not counted: it is trained again whole on resume
        (``Checkpointer.save`` refuses to save in the middle of accumulation anyway).
        """
        consumed = self._consumed()
        if self._fresh or not self._started:
            position = self.sampler.position
        elif consumed >= self._pass_len:
            position = self.sampler.batches_per_epoch
        else:
            position = self.sampler.position + self.sampler.steps_in(consumed)
        state = self.sampler.state_dict(position=position)
        return {"epoch": state["epoch"], "batches": state["position"], "batch_size": self.batch_size, "sampler": state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue where ``state`` left off, at any world size. A state of the per-rank loader
        (an older checkpoint) continues at the global batch that holds its next samples.

        Rank 0 warns (:class:`ElasticResumeWarning`, one line) when the global batch is split
        differently than when it was saved.

        Raises:
            DataError: not a loader state, another dataset or configuration, or a global batch
                that the current world size cannot split (names the world sizes that can).
        """
        if not isinstance(state, Mapping) or not set(_STATE_KEYS) <= set(state):
            got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise DataError(
                f"loader.load_state_dict got {got}, expected keys {list(_STATE_KEYS)}; pass what loader.state_dict() returned"
            )
        note = self.sampler.load_state_dict(state["sampler"])
        self.keeps_trajectory = bool(state["sampler"].get("global_order"))
        if note and comm.is_main():
            warnings.warn(note, ElasticResumeWarning, stacklevel=2)
        self._fresh = True
        self._started = False
        self._taken = 0
        self._trained = 0
        self.current = None
