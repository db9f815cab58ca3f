"""Classification metrics on gathered predictions: accuracy and sklearn's report.

Compute these on the output of :func:`paratrain.data.gather` over an ``exact=True``
loader: one prediction per sample, no padded duplicates, so the numbers of a run on
N ranks equal those of a run on one. The per-class math is scikit-learn's
(``classification_report``), not a re-implementation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from paratrain.errors import DataError, require


def _labels(values: Any, name: str) -> np.ndarray:
    """1-D array of class ids; 2-D scores/logits become their argmax."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        # NumPy has no bfloat16 (logits under bf16 autocast): scores become float32, class ids stay ints.
        values = (values.float() if values.is_floating_point() else values).numpy()
    array = np.asarray(values)
    if array.ndim == 2:
        array = array.argmax(axis=1)
    if array.ndim != 1:
        raise DataError(f"{name} must be class ids (1-D) or scores (2-D), got shape {array.shape}")
    return array


def _pair(predictions: Any, targets: Any) -> tuple[np.ndarray, np.ndarray]:
    y_pred, y_true = _labels(predictions, "predictions"), _labels(targets, "targets")
    if len(y_pred) != len(y_true):
        raise DataError(
            f"{len(y_pred)} predictions for {len(y_true)} targets; gather both from the same exact=True loader"
        )
    if len(y_true) == 0:
        raise DataError("no predictions to score; check that the evaluation loader yielded batches")
    return y_pred, y_true


def accuracy(predictions: Any, targets: Any) -> float:
    """Fraction of correct predictions: ``correct / total``, exactly.

    ``predictions`` are class ids, or scores whose argmax is taken.

    Raises:
        DataError: lengths differ, or nothing to score.
    """
    y_pred, y_true = _pair(predictions, targets)
    return int((y_pred == y_true).sum()) / len(y_true)


@dataclass(frozen=True)
class ClassScores:
    precision: float
    recall: float
    f1: float
    support: int

    def to_dict(self) -> dict[str, float]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1, "support": self.support}


@dataclass(frozen=True)
class ClassificationReport:
    """Accuracy, per-class and averaged scores, and the text of sklearn's report."""

    accuracy: float
    classes: dict[str, ClassScores]
    macro: ClassScores
    weighted: ClassScores
    text: str = field(repr=False)

    def __str__(self) -> str:
        return self.text

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers, for JSON logs."""
        return {
            "accuracy": self.accuracy,
            "classes": {name: scores.to_dict() for name, scores in self.classes.items()},
            "macro avg": self.macro.to_dict(),
            "weighted avg": self.weighted.to_dict(),
        }


def classification_report(
    predictions: Any, targets: Any, target_names: list[str] | None = None, labels: list[int] | None = None, digits: int = 4
) -> ClassificationReport:
    """Precision, recall, F1 and support per class, macro and weighted averages.

    Numbers and text come from ``sklearn.metrics.classification_report`` (classes
    without predictions score 0, not a warning). Not collective: call it on
    gathered predictions, e.g. on rank 0 only.

    Args:
        predictions: class ids, or scores whose argmax is taken.
        targets: true class ids.
        target_names: a display name per class, in ``labels`` order.
        labels: class ids to report (default: ``0 … len(target_names) - 1`` when
            names are given, so a class absent from a small set still gets its row;
            else every id in predictions or targets).
        digits: decimals in the text.

    Raises:
        MissingDependencyError: scikit-learn is not installed (``paratrain[metrics]``).
        DataError: lengths differ, or nothing to score.
    """
    sk_metrics = require("sklearn.metrics", "metrics", "The classification report", package="scikit-learn")
    y_pred, y_true = _pair(predictions, targets)
    if labels is None and target_names is not None:
        labels = list(range(len(target_names)))
    options = {"labels": labels, "target_names": target_names, "zero_division": 0}
    table = sk_metrics.classification_report(y_true, y_pred, output_dict=True, **options)
    text = sk_metrics.classification_report(y_true, y_pred, digits=digits, **options)

    def scores(row: dict[str, float]) -> ClassScores:
        return ClassScores(row["precision"], row["recall"], row["f1-score"], int(row["support"]))

    averages = {"accuracy", "macro avg", "weighted avg", "micro avg"}
    return ClassificationReport(
        accuracy=accuracy(y_pred, y_true),
        classes={name: scores(row) for name, row in table.items() if name not in averages},
        macro=scores(table["macro avg"]),
        weighted=scores(table["weighted avg"]),
        text=text,
    )
