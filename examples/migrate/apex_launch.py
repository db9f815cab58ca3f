"""The APEX tutorial's torch.distributed.launch + APEX script (DeepLab on ADE20k), converted.

Before:  python -m torch.distributed.launch --nproc_per_node=4 main_with_apex.py
         --local_rank from argv, apex.parallel.convert_syncbn_model, amp.initialize + amp.scale_loss,
         apex.parallel.DistributedDataParallel, checkpoint {'model', 'optimizer', 'amp'} saved by local_rank 0
After:   paratrain run --nproc-per-node 2 examples/migrate/apex_launch.py
         (torch.amp replaces apex.amp: precision="bf16-mixed", or "fp16-mixed" with a GradScaler)

A small segmentation net with BatchNorm on generated shapes stands in for DeepLab/ADE20k.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import paratrain as pt


class SegNet(nn.Module):
    def __init__(self, num_classes: int = 2):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        )
        self.head = nn.Conv2d(16, num_classes, 1)

    def forward(self, x):
        return self.head(self.body(x))


def shapes(n: int, seed: int) -> TensorDataset:
    """Noisy images with one bright square each; the mask marks the square."""
    g = torch.Generator().manual_seed(seed)
    masks = torch.zeros(n, 24, 24, dtype=torch.long)
    for i, (top, left, size) in enumerate(torch.randint(0, 12, (n, 3), generator=g).tolist()):
        masks[i, top:top + size + 4, left:left + size + 4] = 1
    images = masks[:, None].float() + 0.5 * torch.randn(n, 1, 24, 24, generator=g)
    return TensorDataset(images, masks)


def iou(preds: torch.Tensor, masks: torch.Tensor) -> float:
    inter = ((preds == 1) & (masks == 1)).sum().item()
    union = ((preds == 1) | (masks == 1)).sum().item()
    return inter / max(union, 1)


def main() -> None:
    parser = argparse.ArgumentParser()  # no --local_rank: the launcher's LOCAL_RANK is read by pt.Runtime
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--out", default="runs/apex")
    args = parser.parse_args()

    # convert_syncbn_model + amp.initialize + apex DDP + set_device(local_rank), in two lines:
    rt = pt.Runtime(strategy="ddp", precision=args.precision, sync_batchnorm=True, seed=0)
    train = rt.loader(shapes(256, seed=0), batch_size=16, shuffle=True)  # DistributedSampler + set_epoch
    valid = rt.loader(shapes(64, seed=1), batch_size=32, exact=True)  # every image once, no padding
    model = SegNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    model, optimizer = rt.setup(model, optimizer)
    # {'model', 'optimizer', 'amp'} → model, optimizer and the precision's scaler, saved atomically by rank 0
    ckpt = pt.Checkpointer(rt, f"{args.out}/checkpoints", model=model, optimizer=optimizer, loader=train)
    for epoch in rt.epochs(ckpt.resume(), total=args.epochs):
        model.train()
        for images, masks in train:
            with rt.autocast():
                loss = F.cross_entropy(model(images), masks)
            rt.backward(loss)  # amp.scale_loss(loss, optimizer).backward()
            rt.step(optimizer)
        model.eval()
        with torch.no_grad():
            outputs = [(model(images).argmax(1), masks) for images, masks in valid]
        preds, masks = rt.gather(torch.cat([p for p, _ in outputs]), torch.cat([m for _, m in outputs]))
        score = iou(preds, masks)
        pt.print(f"Epoch : {epoch} , Train_loss : {pt.all_reduce(loss.detach().float(), 'mean'):.4f} , iou : {score:.4f}")
        ckpt.save(epoch=epoch, metrics={"iou": score})
    rt.close()


if __name__ == "__main__":
    main()
