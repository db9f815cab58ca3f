"""What the loader needs from a sampler: an epoch, and a position within it.

A *position* is the number of this rank's samples of the current epoch that the
training loop has already consumed. Resuming is then: same seed, same epoch, same
order, start at the position. Every sampler paratrain's loader drives implements
:class:`ResumableSampler`; a user's own sampler is adapted by
:class:`ResumableWrapper`, so the loader never asks which kind it holds.

A state is a dict of ints, bools and strings only, so checkpoints can store it and
read it back with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import Sampler

from paratrain.errors import DataError


class ResumableSampler(Sampler[int]):
    """A sampler with ``epoch`` and ``position`` that it can save and restore.

    Subclasses implement :meth:`epoch_indices` (this rank's whole share of the
    current epoch) and may add configuration to the state with ``_config_state``
    (checked on load by ``_check_config``).
    """

    def __init__(self) -> None:
        self.epoch = 0
        #: Samples of the current epoch consumed on this rank; the next pass starts here.
        self.position = 0
        self._yielded = 0  # indices handed out by the running pass (fallback progress count)

    # ---- what subclasses provide --------------------------------------------------------
    def epoch_indices(self) -> list[int]:
        """This rank's indices for the current epoch, from the first one."""
        raise NotImplementedError

    @property
    def num_samples(self) -> int:
        """Number of indices this rank gets in the whole current epoch."""
        return len(self.epoch_indices())

    @property
    def samples_per_epoch(self) -> int:
        """Indices per rank in a whole epoch begun from scratch (no resume offsets)."""
        return self.num_samples

    def _config_state(self) -> dict[str, Any]:
        return {}

    def _state_defaults(self) -> dict[str, Any]:
        """Values for state keys that older versions did not save."""
        return {}

    def _check_config(self, state: Mapping[str, Any]) -> None:
        """Raise DataError when ``state`` was saved by an incompatible sampler."""

    def _restore(self, state: Mapping[str, Any]) -> None:
        """Take ``epoch``/``position`` (and extras) from a checked state."""
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])

    def _on_new_epoch(self) -> None:
        """Forget anything that belonged to the previous epoch only."""

    # ---- the sampler protocol -----------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass; a different epoch starts at position 0."""
        epoch = int(epoch)
        if epoch != self.epoch:
            self.position = 0
            self._yielded = 0
            self._on_new_epoch()
        self.epoch = epoch

    def rewind(self) -> None:
        """Start the current epoch again from its first sample."""
        self.position = 0
        self._yielded = 0

    def __iter__(self) -> Iterator[int]:
        indices = self.epoch_indices()[self.position :]
        self._yielded = 0
        for index in indices:
            self._yielded += 1
            yield index

    def __len__(self) -> int:
        """Indices the next pass yields: the rest of the epoch after ``position``."""
        return max(self.num_samples - self.position, 0)

    # ---- state --------------------------------------------------------------------------
    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        """Epoch, position and configuration, as plain ints/bools.

        Args:
            position: samples of the current epoch consumed on this rank. By default,
                ``position`` plus the indices the running pass has yielded — exact only
                when nothing is prefetched (``num_workers=0``); the loader passes the
                number of samples in the batches it has actually handed out.

        A finished epoch is saved as the start of the next one, so a resumed run
        does not replay an empty remainder.
        """
        position = self.position + self._yielded if position is None else int(position)
        state = {"epoch": self.epoch, "position": position, **self._config_state()}
        if position >= self.num_samples:
            state.update(self._next_epoch_state())
        return state

    def _next_epoch_state(self) -> dict[str, Any]:
        return {"epoch": self.epoch + 1, "position": 0}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``: the next pass yields what the saved run had left.

        Raises:
            DataError: ``state`` is not a state of this kind of sampler, or was saved
                for a different dataset or configuration.
        """
        expected = {"epoch", "position", *self._config_state()}
        if isinstance(state, Mapping):
            state = {**self._state_defaults(), **state}
        if not isinstance(state, Mapping) or not expected <= set(state):
            got = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise DataError(
                f"{type(self).__name__}.load_state_dict got {got}, expected keys {sorted(expected)}; "
                f"pass the dict that {type(self).__name__}.state_dict() (or the loader's state_dict()) returned"
            )
        self._check_config(state)
        self._yielded = 0
        self._restore(state)


class ResumableWrapper(ResumableSampler):
    """Makes a user's sampler resumable: forwards ``set_epoch``, skips consumed indices.

    Exact as long as the wrapped sampler yields the same order for the same epoch
    (a seeded or sequential sampler); an unseeded random sampler cannot be resumed
    by anyone.
    """

    def __init__(self, sampler: Any):
        super().__init__()
        self.sampler = sampler

    def epoch_indices(self) -> list[int]:
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self.epoch)
        return list(self.sampler)

    @property
    def num_samples(self) -> int:
        return len(self.sampler)
