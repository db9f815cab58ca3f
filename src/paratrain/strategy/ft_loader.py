"""The training loader of ``ft-ddp``: each batch is this process's part of the next committed slice.

Drawing a batch starts the step: it waits for the quorum (a joining group heals there and
receives the data cursor with the weights), then splits the slice at the cursor over the processes
of the groups of that quorum (:mod:`paratrain.data.committed_slices`). The cursor moves when ``rt.step``
commits, so the loader draws lazily — no loader workers, nothing prefetched: a batch drawn
ahead would belong to a quorum that may no longer exist.

Loop over epochs with the loader's own count, which a healing group receives::

    while train.epoch < epochs:
        for batch in train: ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from torch.utils.data import default_collate

from paratrain.arguments import option
from paratrain.data.committed_slices import CommittedSlices
from paratrain.data.batches import move_to
from paratrain.errors import ConfigError

if TYPE_CHECKING:
    from paratrain.strategy.ft_ddp import FTDDPStrategy


class FTLoader:
    """Batches of this process's part of each step's slice of one seeded order per epoch.

    Args:
        strategy: the connected ``ft-ddp`` strategy (quorum, loss weight, commit).
        dataset: a map-style dataset, the same on every group.
        batch_size: the global batch: samples per step over all processes of all groups.
        seed: the orders' seed (the Runtime's).
        shuffle: a new order every epoch (False: dataset order).
        collate_fn: builds a batch from a list of samples (torch's ``default_collate``).
        move_to_device: batches on the strategy's device.

    Raises:
        ConfigError: an option this loader cannot honour (``num_workers``, ``exact``, …).
    """

    def __init__(self, strategy: FTDDPStrategy, dataset: Any, batch_size: int, seed: int = 0, shuffle: bool = True,
                 collate_fn: Callable[[list[Any]], Any] | None = None, move_to_device: bool = True, **refused: Any):
        if any(value not in (None, False, 0) for value in refused.values()):
            names = ", ".join(option(name) for name, value in refused.items() if value not in (None, False, 0))
            raise ConfigError(f"the ft-ddp training loader does not take {names}: it draws each group's part of a "
                              "step only once the step's quorum is known (shuffle, collate_fn, move_to_device are "
                              "accepted)")
        self.strategy, self.dataset = strategy, dataset
        self.slices = CommittedSlices(len(dataset), batch_size, seed=seed, shuffle=shuffle)
        self.collate_fn = collate_fn or default_collate
        self.move_to_device = move_to_device
        #: the dataset indices of the batch drawn last (this process's part of the step's slice).
        self.last_indices: list[int] = []
        #: the parts the step of the batch drawn last was split into (its processes).
        self.last_parts = 0

    @property
    def epoch(self) -> int:
        """The job's epoch (from the committed cursor; a healing group receives it)."""
        return self.slices.epoch

    def __iter__(self) -> Iterator[Any]:
        """Until the epoch's cursor reaches its end: quorum → this process's part → yield; then the next epoch."""
        while not self.slices.epoch_done:
            part, parts = self.strategy.begin_step()
            if self.slices.epoch_done:  # healed to the end of an epoch a live group just finished
                break
            indices, self.strategy.loss_weight = self.slices.part(part, parts)
            self.last_indices, self.last_parts = indices, parts
            batch = self.collate_fn([self.dataset[i] for i in indices])
            yield move_to(batch, self.strategy.device) if self.move_to_device else batch
        self.slices.next_epoch()

    def __len__(self) -> int:
        """Steps in a whole epoch when nothing fails."""
        return -(-self.slices.dataset_len // self.slices.global_batch)

    def state_dict(self) -> dict[str, Any]:
        return self.slices.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.slices.load_state_dict(state)
