"""``seg``: a small U-Net with BatchNorm on generated shapes, scored by mean IoU.

With small per-rank batches each rank's BatchNorm sees only its own few images;
``--sync-bn`` makes the statistics global (the classic DDP and APEX
tutorials convert the model with ``convert_sync_batchnorm`` before wrapping it in DDP; here the strategy does).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from paratrain import comm
from paratrain.tasks.api import Evaluation, Evaluator, Recipe, Task, stack_pairs
from paratrain.tasks.shapes import CLASSES, ShapesDataset

TRAIN_SIZE, DEV_SIZE = 1024, 256
TRAIN_SEED, DEV_SEED = 1, 2  # different generators: no dev image is a training image


def _block(channels_in: int, channels_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(channels_out),
        nn.ReLU(inplace=True),
    )


class SegNet(nn.Module):
    """Two resolutions, one skip connection, BatchNorm after every convolution."""

    def __init__(self, classes: int, width: int = 16):
        super().__init__()
        self.encode = nn.Sequential(_block(3, width), _block(width, width))
        self.bottom = nn.Sequential(_block(width, 2 * width), _block(2 * width, 2 * width))
        self.decode = _block(3 * width, width)
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        skip = self.encode(images)
        deep = self.bottom(F.max_pool2d(skip, 2))
        up = F.interpolate(deep, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(self.decode(torch.cat([up, skip], dim=1)))


class SegmentationEvaluator(Evaluator):
    """A confusion matrix per rank, summed over ranks: IoU per class, mIoU and pixel accuracy."""

    def __init__(self, label_names: list[str]):
        self.label_names = list(label_names)
        classes = len(label_names)
        self.confusion = torch.zeros((classes, classes), dtype=torch.int64)

    def update(self, scores: torch.Tensor, batch: dict[str, torch.Tensor]) -> None:
        classes = len(self.label_names)
        predicted = scores.argmax(dim=1).flatten().cpu()
        target = batch["labels"].flatten().cpu()
        self.confusion += torch.bincount(target * classes + predicted, minlength=classes * classes).reshape(classes, classes)

    def compute(self) -> Evaluation:
        """Collective: all ranks call it together (one all-reduce of the confusion matrix)."""
        confusion = comm.all_reduce(self.confusion, op="sum").double()
        hits = confusion.diag()
        union = confusion.sum(0) + confusion.sum(1) - hits
        present = union > 0  # a class absent from targets and predictions does not count
        iou = torch.where(present, hits / union.clamp(min=1), torch.full_like(hits, float("nan")))
        miou = float(iou[present].mean()) if bool(present.any()) else float("nan")
        pixel_accuracy = float(hits.sum() / confusion.sum().clamp(min=1))
        lines = [f"{'class':>12}  {'IoU':>7}"]
        lines += [f"{name:>12}  {float(value):7.4f}" for name, value in zip(self.label_names, iou)]
        lines += [f"{'mIoU':>12}  {miou:7.4f}", f"{'pixel acc':>12}  {pixel_accuracy:7.4f}"]
        metrics = {"miou": miou, "pixel_accuracy": pixel_accuracy}
        metrics.update({f"iou_{name}": float(value) for name, value in zip(self.label_names, iou)})
        return Evaluation(metrics=metrics, report="\n".join(lines))


class SegTask(Task):
    name = "seg"
    options_used = ()
    summary = "small U-Net with BatchNorm on generated shapes, mIoU (try --sync-bn)"
    recipe = Recipe(epochs=6, batch_size=8, eval_batch_size=64, lr=3e-3, warmup=0.05, metric="miou")
    metric_names = ("miou", "pixel_accuracy")

    def __init__(self, options=None):
        super().__init__(options)
        self.label_names = list(CLASSES)

    def datasets(self) -> tuple[ShapesDataset, ShapesDataset]:
        train = ShapesDataset(min(TRAIN_SIZE, self.options.limit_train or TRAIN_SIZE), seed=TRAIN_SEED)
        dev = ShapesDataset(min(DEV_SIZE, self.options.limit_eval or DEV_SIZE), seed=DEV_SEED)
        return train, dev

    def collate(self, samples: list[Any]) -> dict[str, torch.Tensor]:
        return stack_pairs(samples)

    def build_model(self) -> nn.Module:
        return SegNet(len(self.label_names))

    def forward(self, model, batch):
        logits = model(batch["images"])
        return F.cross_entropy(logits, batch["labels"]), logits

    def evaluator(self) -> Evaluator:
        return SegmentationEvaluator(self.label_names)
