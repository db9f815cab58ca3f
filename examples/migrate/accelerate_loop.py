"""The BERT multi-GPU comparison's Accelerate script (multi-gpu-accelerate-cls.py), converted.

Before:  accelerate launch multi-gpu-accelerate-cls.py
         accelerator = Accelerator(); model, optimizer, train_loader, dev_loader = accelerator.prepare(...)
         accelerator.backward(loss); evaluation gathered with duplicates ("every GPU scored the data once")
After:   paratrain run --nproc-per-node 2 examples/migrate/accelerate_loop.py

(The Accelerate script itself also runs unchanged under paratrain run.)
"""

import argparse

import torch
import torch.nn.functional as F
from reviews import BagOfWords, make_reviews

import paratrain as pt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--precision", default="bf16-mixed")  # Accelerator(mixed_precision="bf16")
    args = parser.parse_args()

    rt = pt.Runtime(strategy="ddp", precision=args.precision, seed=42)  # Accelerator()
    # accelerator.prepare(model, optimizer, train_loader, dev_loader):
    train = rt.loader(make_reviews(1200, seed=0), batch_size=32, shuffle=True)
    dev = rt.loader(make_reviews(300, seed=1), batch_size=100, exact=True)  # no padded duplicates
    model = BagOfWords()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = rt.setup(model, optimizer)
    for epoch in range(args.epochs):
        model.train()
        for ids, labels in train:
            with rt.autocast():
                loss = F.cross_entropy(model(ids), labels)
            rt.backward(loss)  # accelerator.backward(loss)
            rt.step(optimizer, clip_norm=1.0)  # clip_grad_norm_ + step + zero_grad
        model.eval()
        with torch.no_grad():
            scores = [(model(ids).argmax(1), labels) for ids, labels in dev]
        # accelerator.gather_for_metrics → rt.gather: dataset order, every review once
        preds, labels = rt.gather(torch.cat([p for p, _ in scores]), torch.cat([y for _, y in scores]))
        pt.print(f"epoch {epoch + 1}: dev accuracy {pt.accuracy(preds, labels):.4f} on {len(labels)} reviews")
    rt.close()


if __name__ == "__main__":
    main()
