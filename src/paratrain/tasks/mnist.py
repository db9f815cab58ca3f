"""``mnist``: the CNN of torch's classic MNIST example, on MNIST IDX files from ``--data DIR``
(raw or .gz; nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from paratrain.arguments import option
from paratrain.errors import ConfigError, DataError
from paratrain.strategy.optimizer_kernels import kernel_options
from paratrain.tasks.api import Evaluator, Recipe, Task, stack_pairs
from paratrain.tasks.classification import METRICS, ClassificationEvaluator
from paratrain.tasks.idx import read_pair

TRAIN_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
MEAN, STD = 0.1307, 0.3081  # MNIST's pixel statistics, as in the classic example's Normalize


class MnistNet(nn.Module):
    """The network of torch's classic MNIST example (pytorch/examples), returning log-probabilities."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


class MnistTask(Task):
    name = "mnist"
    options_used = ("data",)
    summary = "the classic MNIST example's CNN on IDX files from --data DIR (raw or .gz)"
    recipe = Recipe(epochs=2, batch_size=64, eval_batch_size=1000, lr=0.01)
    metric_names = METRICS

    def __init__(self, options=None):
        super().__init__(options)
        self.label_names = [str(d) for d in range(10)]

    def _directory(self) -> Path:
        if not self.options.data:
            raise ConfigError(
                f"the mnist task needs {option('data', 'DIR')} holding {', '.join(TRAIN_FILES + TEST_FILES)} (raw or .gz)"
            )
        directory = Path(self.options.data)
        if not directory.is_dir():
            raise DataError(f"{option('data', str(directory))} is not a directory; point it at the folder with the MNIST IDX files")
        return directory

    def check(self) -> None:
        directory = self._directory()
        for stems in (TRAIN_FILES, TEST_FILES):
            read_pair(directory, *stems, height=28, width=28, classes=10)

    def datasets(self) -> tuple[TensorDataset, TensorDataset]:
        directory = self._directory()
        train = self._dataset(directory, TRAIN_FILES, self.options.limit_train)
        test = self._dataset(directory, TEST_FILES, self.options.limit_eval)
        return train, test

    def _dataset(self, directory: Path, stems: tuple[str, str], limit: int | None) -> TensorDataset:
        images, labels = read_pair(directory, *stems, height=28, width=28, classes=10)
        images, labels = images[:limit], labels[:limit]
        pixels = (torch.from_numpy(images.copy()).float().div_(255.0).sub_(MEAN).div_(STD)).unsqueeze(1)
        return TensorDataset(pixels, torch.from_numpy(labels.astype("int64")))

    def collate(self, samples: list[Any]) -> dict[str, torch.Tensor]:
        return stack_pairs(samples)

    def build_model(self) -> nn.Module:
        return MnistNet()

    def build_optimizer(self, model, lr, weight_decay, fused=True):
        # The classic MNIST example's optimizer: SGD with momentum 0.5.
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.5, weight_decay=weight_decay,
                               **kernel_options(torch.optim.SGD, model.parameters(), enabled=fused))

    def forward(self, model, batch):
        log_probs = model(batch["images"])
        return F.nll_loss(log_probs, batch["labels"]), log_probs

    def evaluator(self) -> Evaluator:
        return ClassificationEvaluator(self.label_names)
