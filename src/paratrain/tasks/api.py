"""The task interface: what the fit loop needs to train and evaluate one model on one dataset.

A task bundles everything that is *about the problem* — datasets, model, collate,
loss, metric, label names, how to turn raw inputs into a batch at predict time —
so the fit loop (:mod:`paratrain.loop`) only deals with *how to train*: devices,
ranks, steps, checkpoints and logs. One task per file; :mod:`paratrain.tasks.registry`
finds them by name.
"""

from __future__ import annotations

import abc
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from paratrain.arguments import option, option_field
from paratrain.errors import ConfigError
from paratrain.strategy.optimizer_kernels import kernel_options
from paratrain.no_follow import open_text

TASK_FILE = "task.json"  # in the output directory: which task (and options) the checkpoints belong to


def stack_pairs(samples: list[Any]) -> dict[str, torch.Tensor]:
    """``(image, label)`` dataset items → ``{"images": …, "labels": …}`` stacked (digits, mnist, seg)."""
    images, labels = zip(*samples)
    return {"images": torch.stack(images), "labels": torch.stack(labels)}


#: The options that only some tasks read.
TASK_SPECIFIC_OPTIONS = ("data", "model_path", "max_len")


@dataclass(frozen=True)
class TaskOptions:
    """Options of ``paratrain train`` for the task. ``limit_train``/``limit_eval`` apply to every
    task; ``data``, ``model_path`` and ``max_len`` only to a task that lists them in
    :attr:`Task.options_used` (any other refuses them: a flag must not be silently ignored).

    Args:
        data: a directory with the task's files (``mnist``: the IDX files).
        model_path: a local pretrained model directory (``text-cls``: BERT + tokenizer).
        limit_train: use only the first N training samples (quick runs, tests).
        limit_eval: use only the first N evaluation samples.
        max_len: longest input in tokens (text tasks).
    """

    # Each field is also a flag of `paratrain train` (cli/config_flags.py).
    data: str | None = option_field(None, "directory with the task's data files (mnist: the IDX files)", metavar="DIR")
    model_path: str | None = option_field(None, "local pretrained model directory (text-cls: BERT + tokenizer)",
                                          metavar="DIR")
    limit_train: int | None = option_field(None, "use only the first N training samples", metavar="N")
    limit_eval: int | None = option_field(None, "use only the first N dev samples", metavar="N")
    max_len: int | None = option_field(None, "longest input in tokens (text-cls, default 96)", metavar="N")

    def __post_init__(self) -> None:
        for name in ("limit_train", "limit_eval", "max_len"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{option(name)} must be a positive integer, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Recipe:
    """Training defaults a task is known to train well with; every field can be overridden."""

    epochs: int = 1
    batch_size: int = 32  # per rank
    eval_batch_size: int = 256  # per rank
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: float = 0.0  # fraction of the optimizer steps with a linearly rising LR
    clip_norm: float | None = None
    metric: str = "accuracy"  # the dev metric that picks the best checkpoint (higher is better, except "loss")


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation pass found: numbers for logs and checkpoints, and a report for people."""

    metrics: dict[str, float]
    #: text for people: a ``str``, or an object whose ``str()`` formats it when it is shown (rank 0)
    report: Any = ""


@dataclass(frozen=True)
class Prediction:
    """One input's predicted label and its probability."""

    input: str
    label: str
    probability: float
    scores: dict[str, float] = field(default_factory=dict)


class Evaluator(abc.ABC):
    """Accumulates one evaluation pass on this rank; :meth:`compute` combines all ranks."""

    @abc.abstractmethod
    def update(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        """Add one batch: the model's ``scores`` (e.g. logits) and the batch they came from."""

    @abc.abstractmethod
    def compute(self) -> Evaluation:
        """Metrics over every rank's samples. Collective: all ranks call it together."""


class Task(abc.ABC):
    """One built-in problem: real data, a model, a loss, a metric.

    Subclasses set ``name``, ``summary``, ``recipe`` and ``label_names`` and
    implement the abstract methods. The fit loop calls, on every rank:
    :meth:`datasets` → :meth:`build_model` → per batch :meth:`collate` and
    :meth:`forward` → per evaluation :meth:`evaluator`. Rank 0 calls :meth:`save`
    into the output directory so that :meth:`from_record` can rebuild the task
    (and its model's shape) for ``paratrain predict`` without the training data.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    recipe: ClassVar[Recipe] = Recipe()
    #: dev metrics the evaluator reports besides "loss" (empty: known only after an evaluation)
    metric_names: ClassVar[tuple[str, ...]] = ()
    #: which of :data:`TASK_SPECIFIC_OPTIONS` the task reads (None: any; the built-in tasks say)
    options_used: ClassVar[tuple[str, ...] | None] = None
    label_names: list[str]
    #: how the command line named a task that is not built in (``module:attr``, ``/abs/file.py:attr``);
    #: ``task.json`` keeps it so that ``paratrain predict`` can import the task again
    reference: str | None = None

    def __init__(self, options: TaskOptions | None = None):
        """Keep the task's options, refusing those it does not use.

        Raises:
            ConfigError: an option the task does not use (see :attr:`options_used`)."""
        self.options = options or TaskOptions()
        unused = [] if self.options_used is None else \
            [name for name in TASK_SPECIFIC_OPTIONS if name not in self.options_used and getattr(self.options, name) is not None]
        if unused:
            takes = f" (it takes {', '.join(option(n) for n in self.options_used)})" if self.options_used else ""
            raise ConfigError(f"task {self.name!r} does not use {option(unused[0], getattr(self.options, unused[0]))}{takes}; drop it")

    # ---- data ---------------------------------------------------------------------------
    def check(self) -> None:
        """Cheap checks of inputs and dependencies, run before any worker process starts.

        Raises:
            ConfigError, DataError, MissingDependencyError: as :meth:`datasets` would, later.
        """

    @abc.abstractmethod
    def datasets(self) -> tuple[torch.utils.data.Dataset, torch.utils.data.Dataset]:
        """``(train, dev)``: map-style datasets, identical on every rank.

        Raises:
            DataError: the data is missing or malformed (names the file and what was expected).
            MissingDependencyError: an optional package the task needs is not installed.
        """

    def sample_lengths(self, dataset: Any) -> list[int] | None:
        """Each training sample's length in the units its batch is padded in (tokens), or
        ``None`` when batches are not padded (images). With lengths the fit loop groups
        similar lengths into one step's batches (``group_by_length``)."""
        return None

    @abc.abstractmethod
    def collate(self, samples: list[Any]) -> dict[str, torch.Tensor]:
        """A list of dataset items → one batch of tensors (with a ``labels`` entry)."""

    # ---- model --------------------------------------------------------------------------
    @abc.abstractmethod
    def build_model(self) -> torch.nn.Module:
        """A new model; the same weights on every rank for the same seed."""

    def build_optimizer(
        self, model: torch.nn.Module, lr: float, weight_decay: float, fused: bool = True
    ) -> torch.optim.Optimizer:
        """AdamW by default; a task may pick what its model was designed with.

        ``fused``: use torch's fused (else foreach) update kernel where it has one
        (:func:`~paratrain.strategy.optimizer_kernels.kernel_options`); False keeps torch's default.
        """
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay,
                                 **kernel_options(torch.optim.AdamW, model.parameters(), enabled=fused))

    @abc.abstractmethod
    def forward(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, scores)`` for a batch already on the model's device."""

    @abc.abstractmethod
    def evaluator(self) -> Evaluator:
        """A fresh accumulator for one evaluation pass."""

    # ---- predict ------------------------------------------------------------------------
    def predict(self, model: torch.nn.Module, inputs: list[str]) -> list[Prediction]:
        """Labels and probabilities for raw inputs (``paratrain predict``).

        Raises:
            ConfigError: this task takes no raw inputs.
        """
        raise ConfigError(f"task {self.name!r} has no predict from raw inputs; predict works for text tasks (text-cls)")

    # ---- saving what predict needs --------------------------------------------------------
    def model_identity(self) -> str | None:
        """What tells this task's model from another's where the name and options cannot
        (every ``pt.fit(model)`` run is task "model"); ``task.json`` keeps it, and a run
        directory holding another identity is refused. ``None``: the name and options do."""
        return None

    def save_artifacts(self, directory: Path) -> dict[str, Any]:
        """Write what :meth:`from_record` needs besides the options (a vocabulary, a
        tokenizer) into ``directory``; return JSON-safe facts for ``task.json``."""
        return {}

    def save(self, directory: str | Path) -> Path:
        """Write ``task.json`` (name, options, labels, :meth:`save_artifacts`) into ``directory``."""
        path = Path(directory) / TASK_FILE
        record = {
            "task": self.name,
            "options": self.options.to_dict(),
            "label_names": list(self.label_names),
        }
        if self.model_identity() is not None:
            record["model"] = self.model_identity()
        if self.reference is not None:
            from paratrain.tasks.task_ref import file_sha256, reference_file

            record["reference"] = self.reference
            task_file = reference_file(self.reference)
            if task_file is not None and (digest := file_sha256(task_file)):
                record["reference_sha256"] = digest  # predict imports it again only while it is this file
        path.parent.mkdir(parents=True, exist_ok=True)
        record["artifacts"] = self.save_artifacts(path.parent)
        tmp = path.with_suffix(".json.tmp")
        with open_text(tmp, "w", encoding="utf-8") as handle:  # never through a planted link
            handle.write(json.dumps(record, ensure_ascii=False, indent=1))
        tmp.replace(path)
        return path

    @classmethod
    def from_record(cls, record: dict[str, Any], directory: Path) -> Task:
        """Rebuild the task that :meth:`save` wrote into ``directory`` (subclasses read their artifacts)."""
        task = cls(TaskOptions(**record.get("options", {})))
        task.label_names = list(record.get("label_names", task.label_names))
        return task

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options})"


def read_task_record(directory: str | Path) -> dict[str, Any] | None:
    """The ``task.json`` in ``directory``, or ``None`` when there is none.

    Raises:
        DamagedTaskRecord: the file is a regular file but not a task record (cut by a kill or a full disk).
        ConfigError: the file is a link or not a regular file, or cannot be read.
    """
    path = Path(directory) / TASK_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        with open_text(path, "r", encoding="utf-8") as handle:  # a planted link or FIFO: refused
            text = handle.read()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a readable task record ({exc}); use another {option('out_dir')} directory") from None
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise DamagedTaskRecord(f"{path} is not a readable task record ({exc}); use another {option('out_dir')} "
                                "directory") from None
    if not isinstance(record, dict) or not isinstance(record.get("task"), str):
        raise DamagedTaskRecord(f"{path} names no task; use another {option('out_dir')} directory")
    return record


class DamagedTaskRecord(ConfigError):
    """``task.json`` is a regular file that does not parse as a task record (cut, or a bad byte)."""
