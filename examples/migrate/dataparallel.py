"""The DataParallel project of the DataParallel-to-DDP conversion post, converted (the detectron2 `launch()` + `comm` recipe, done for you).

Before:  python train.py, with model = torch.nn.DataParallel(model).cuda(): one process, threads,
         a batch of N split across GPUs, comm.is_main_process() / comm.gather / comm.synchronize
After:   paratrain run --nproc-per-node 2 examples/migrate/dataparallel.py
         (or python examples/migrate/dataparallel.py: one process works too)
"""

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import paratrain as pt


def prepare_data(folder: Path) -> None:
    """One-time work before training (the post: download, sync to local disk, …): here, generate."""
    g = torch.Generator().manual_seed(0)
    features = torch.randn(1000, 16, generator=g)
    labels = (features[:, :4].sum(1) > 0).long() + 2 * (features[:, 4:8].sum(1) > 0).long()
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"features": features, "labels": labels}, folder / "data.pt")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32, help="per process: DataParallel's N / GPUs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="runs/dataparallel")
    args = parser.parse_args()
    out = Path(args.out)

    rt = pt.Runtime(strategy="ddp", seed=0)  # was: nn.DataParallel(model)
    with pt.main_first():  # rank 0 prepares, the others wait, then read what it wrote
        if pt.is_main() and not (out / "data" / "data.pt").exists():
            prepare_data(out / "data")
    data = torch.load(out / "data" / "data.pt", weights_only=True)
    dataset = TensorDataset(data["features"], data["labels"])
    train_set, dev_set = torch.utils.data.random_split(dataset, [800, 200], generator=torch.Generator().manual_seed(0))
    train = rt.loader(train_set, batch_size=args.batch_size, shuffle=True)
    dev = rt.loader(dev_set, batch_size=100, exact=True)

    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = rt.setup(model, optimizer)
    ckpt = pt.Checkpointer(rt, out / "checkpoints", model=model, optimizer=optimizer, loader=train)
    for epoch in rt.epochs(ckpt.resume(), total=args.epochs):
        model.train()
        losses = pt.RunningMean()
        for x, y in train:
            loss = F.cross_entropy(model(x), y)
            rt.backward(loss)
            rt.step(optimizer)
            losses.update(loss.detach(), len(y))
        model.eval()
        with torch.no_grad():
            scores = [(model(x).argmax(1), y) for x, y in dev]
        preds, labels = rt.gather(torch.cat([p for p, _ in scores]), torch.cat([y for _, y in scores]))
        accuracy = pt.accuracy(preds, labels)
        # comm.gather(loss) + is_main_process() → one global mean, printed once
        pt.print(f"epoch {epoch + 1}: train loss {losses.compute():.4f}, dev accuracy {accuracy:.4f}")
        ckpt.save(epoch=epoch, metrics={"accuracy": accuracy})
    if pt.is_main():
        (out / "result.json").write_text(json.dumps({"accuracy": accuracy, "world_size": rt.world_size}))
    rt.close()


if __name__ == "__main__":
    main()
