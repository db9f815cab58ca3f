"""The tracker interface: one experiment tracker (TensorBoard, CSV, MLflow, W&B, …) as rank 0 feeds it.

A tracker is one small class in its own file of this package, registered by name with
:func:`register`; :mod:`paratrain.trackers.hub` opens the ones a run asks for, keeps their run ids
in the run directory and turns every failure of theirs into one line. A tracker never raises into
the training loop: the hub catches what its methods raise.

Trackers differ in one way that matters on resume. A *rewinding* tracker (``rewinds = True``:
TensorBoard's ``purge_step``, the CSV file) can drop what a failed attempt logged after the step a
resumed run continues from, and the redone steps replace it. The others are append-only (MLflow keeps
every point it is sent, W&B refuses a step below its last one): the hub sends them each step once,
so after a resume they get nothing until the steps the failed attempt already sent them are passed.

"Sent" means *held*: a step counts as sent once the tracker has it, which for most trackers is when
``log`` returns (MLflow's server answered, the file was written). W&B's service writes its run file only
as the run ends (``holds_on_log = False``: a process killed with SIGKILL after six steps leaves an empty
file), so its steps count as held once ``close`` returned; after an attempt that never closed it, the
resumed run sends W&B every step from the resume step on, and W&B itself drops a step it already has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class RunInfo:
    """What a tracker is told about the run when it opens.

    ``directory``: the run directory (paratrain's files; a tracker may write under it);
    ``name``: a readable run name (the directory's name); ``config``: hyperparameters and the
    job's shape (task, strategy, precision, world size), flat, JSON-safe values;
    ``run_id``: the id this tracker gave the run in an earlier attempt (``None``: a new run);
    ``purge_from``: for a rewinding tracker, the first step whose earlier records must go
    (``None``: nothing to drop).
    """

    directory: Path
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    purge_from: int | None = None


class Tracker:
    """One experiment tracker. Rank 0 only; not collective.

    Class attributes: ``name`` (what ``--log-with`` calls it), ``package`` (the module to import;
    ``None``: none), ``extra`` (``pip install 'paratrain[EXTRA]'``), ``has_artifacts`` (it stores
    files: the final weights go there), ``rewinds`` and ``holds_on_log`` (see the module docstring),
    ``files`` (the names it writes in the run directory).
    """

    name: ClassVar[str] = ""
    package: ClassVar[str | None] = None
    extra: ClassVar[str | None] = None
    has_artifacts: ClassVar[bool] = False
    rewinds: ClassVar[bool] = False
    holds_on_log: ClassVar[bool] = True  # a step logged is kept by the tracker once log() returns
    files: ClassVar[tuple[str, ...]] = ()  # what it writes directly in the run directory

    def open(self, run: RunInfo) -> str | None:
        """Start or continue the run; returns the id to keep for the next attempt (``None``: none).

        Raises anything when the tracker cannot be reached: the hub says it in one line and goes on without it.
        """
        raise NotImplementedError

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Numbers at ``step`` (names like ``train/loss``)."""
        raise NotImplementedError

    def summary(self, values: dict[str, Any], step: int) -> None:
        """The run's closing numbers and words (the fit summary). Default: the numbers as metrics."""
        numbers = {f"summary/{k}": float(v) for k, v in values.items() if _is_number(v)}
        if numbers:
            self.log(numbers, step)

    def artifact(self, path: Path) -> None:
        """Store the file ``path`` with the run (only called when ``has_artifacts``)."""

    def close(self, failed: bool = False) -> None:
        """Flush and end the run, as failed when the training raised (a later attempt may continue it)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


TRACKERS: dict[str, type[Tracker]] = {}


def register(cls: type[Tracker]) -> type[Tracker]:
    """Class decorator: make ``cls`` available to ``--log-with`` under ``cls.name``."""
    TRACKERS[cls.name] = cls
    return cls
