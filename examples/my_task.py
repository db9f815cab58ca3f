"""Your own model in paratrain: a task object (copy this file and change the five methods).

A task bundles what is *about the problem* — data, batches, model, loss, metric — and
paratrain does the rest (processes, wrapping, data sharding, evaluation, checkpoints):

    paratrain bench --task examples.my_task:TASK --nproc-per-node 2     # from this checkout
    paratrain bench --task path/to/my_task.py:TASK                       # a file, from anywhere

This one classifies scikit-learn's bundled breast-cancer measurements (569 patients,
30 features, benign or malignant) with a small MLP; nothing is downloaded.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from paratrain.tasks.api import Evaluator, Recipe, Task
from paratrain.tasks.classification import METRICS, ClassificationEvaluator


class BreastCancerTask(Task):
    name = "breast-cancer"
    summary = "MLP on scikit-learn's breast-cancer measurements (569 samples, 2 classes)"
    # Defaults a run starts from (every one can be overridden on the command line).
    recipe = Recipe(batch_size=16, eval_batch_size=128, lr=1e-3)
    metric_names = METRICS  # what evaluator() reports besides the loss
    options_used = ()  # which of --data, --model-path, --max-len it reads: the others are refused

    def __init__(self, options=None):
        super().__init__(options)  # options: --limit-train, --limit-eval (and those in options_used)
        self.label_names = ["malignant", "benign"]

    def datasets(self):
        """(train, dev): map-style datasets, the same on every process (no randomness without a fixed seed)."""
        from sklearn.datasets import load_breast_cancer

        data = load_breast_cancer()
        x = torch.tensor(data.data, dtype=torch.float32)
        y = torch.tensor(data.target, dtype=torch.long)
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        dev, train = order[:114], order[114:]
        mean, std = x[train].mean(0), x[train].std(0)  # standardise with the training statistics only
        x = (x - mean) / std
        train, dev = train[: self.options.limit_train], dev[: self.options.limit_eval]
        return TensorDataset(x[train], y[train]), TensorDataset(x[dev], y[dev])

    def collate(self, samples):
        """A list of dataset items → one batch: a dict of tensors with a "labels" entry."""
        features, labels = zip(*samples)
        return {"features": torch.stack(features), "labels": torch.stack(labels)}

    def build_model(self):
        """A new model. paratrain makes every process start from the same weights."""
        return nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 2))

    def forward(self, model, batch):
        """(loss, scores) for a batch already on the model's device."""
        logits = model(batch["features"])
        return nn.functional.cross_entropy(logits, batch["labels"]), logits

    def evaluator(self) -> Evaluator:
        """Accumulates one pass over the dev set; accuracy, macro F1 and a per-class report."""
        return ClassificationEvaluator(self.label_names)


TASK = BreastCancerTask
