"""Evaluation and prediction shared by the classification tasks (text-cls, digits, mnist)."""

from __future__ import annotations

import torch

from paratrain.data import gather
from paratrain.metrics import DeferredReport, accuracy, macro_f1
from paratrain.tasks.api import Evaluation, Evaluator, Prediction

METRICS = ("accuracy", "macro_f1")


class ClassificationEvaluator(Evaluator):
    """Keeps this rank's predicted and true class ids; :meth:`compute` gathers them in dataset order.

    Run it over an ``exact=True`` loader: every sample is scored once, so the
    accuracy on N ranks equals the accuracy on one.
    """

    def __init__(self, label_names: list[str] | None = None):
        self.label_names = list(label_names) if label_names else None
        self._predictions: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []

    def update(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        self._predictions.append(scores.argmax(dim=-1).cpu())
        # A dict batch carries "labels"; an (inputs, labels) pair carries them last.
        self._targets.append((batch["labels"] if isinstance(batch, dict) else batch[-1]).cpu())

    def compute(self) -> Evaluation:
        """Accuracy, macro F1 and sklearn's per-class report (formatted where it is shown). Collective:
        all ranks call it together.

        Raises:
            DataError: the evaluation loader yielded nothing to score.
        """
        predictions = torch.cat(self._predictions) if self._predictions else torch.empty(0, dtype=torch.long)
        targets = torch.cat(self._targets) if self._targets else torch.empty(0, dtype=torch.long)
        predictions, targets = gather(predictions, targets)
        labels = list(range(len(self.label_names))) if self.label_names else None
        metrics = {"accuracy": accuracy(predictions, targets), "macro_f1": macro_f1(predictions, targets, labels),
                   "samples": float(len(targets))}
        return Evaluation(metrics=metrics, report=DeferredReport(predictions, targets, self.label_names))


def predictions_from_scores(inputs: list[str], scores: torch.Tensor, label_names: list[str]) -> list[Prediction]:
    """Softmax each row of ``scores`` and name its most likely label."""
    probabilities = torch.softmax(scores.float(), dim=-1).cpu()
    out = []
    for text, row in zip(inputs, probabilities):
        best = int(row.argmax())
        out.append(
            Prediction(
                input=text,
                label=label_names[best],
                probability=float(row[best]),
                scores={name: float(p) for name, p in zip(label_names, row)},
            )
        )
    return out
