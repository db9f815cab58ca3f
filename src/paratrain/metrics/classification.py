"""Classification metrics on gathered predictions: accuracy, macro F1 and sklearn's report.

Compute these on the output of :func:`paratrain.data.gather` over an ``exact=True``
loader: one prediction per sample, no padded duplicates, so the numbers of a run on
N ranks equal those of a run on one. The report (per-class table and its text) is
scikit-learn's ``classification_report``, not a re-implementation. The fit loop's
per-evaluation numbers (accuracy, macro F1) are counted here instead, and the report
is formatted only where it is shown (:class:`DeferredReport`): importing scikit-learn
costs every process 1–4 s of CPU, paid before that at every run's first evaluation.
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


def macro_f1(predictions: Any, targets: Any, labels: list[int] | None = None) -> float:
    """The unweighted mean over ``labels`` of each class's F1 = 2·TP / (2·TP + FP + FN), a class with
    neither predictions nor samples scoring 0 — sklearn's ``f1_score(average="macro", zero_division=0)``.

    Args:
        labels: class ids to average over (default: every id in predictions or targets).

    Raises:
        DataError: lengths differ, or nothing to score.
    """
    y_pred, y_true = _pair(predictions, targets)
    classes = np.asarray(labels) if labels is not None else np.union1d(y_pred, y_true)
    scores = []
    for label in classes:
        hits = int(((y_pred == label) & (y_true == label)).sum())
        wrong = int((y_pred == label).sum()) + int((y_true == label).sum()) - 2 * hits  # FP + FN
        scores.append(2 * hits / (2 * hits + wrong) if hits or wrong else 0.0)
    return float(np.mean(scores))


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


class DeferredReport:
    """The text of :func:`classification_report` for gathered ``predictions``, formatted the first time
    it is shown (``str()``, ``in``): ranks that never print it never import scikit-learn. Not collective."""

    def __init__(self, predictions: Any, targets: Any, target_names: list[str] | None = None):
        self._arguments = (predictions, targets, target_names)
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            predictions, targets, names = self._arguments
            self._text = classification_report(predictions, targets, target_names=names).text
        return self._text

    def __contains__(self, part: str) -> bool:
        return part in str(self)

    def __bool__(self) -> bool:
        return True

