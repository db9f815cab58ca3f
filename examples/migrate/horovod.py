"""The BERT multi-GPU comparison's Horovod script (multi-gpu-horovod-cls.py), converted.

Before:  horovodrun -np 2 -H localhost:2 python multi-gpu-horovod-cls.py
         hvd.init(); DistributedSampler(num_replicas=hvd.size(), rank=hvd.rank());
         hvd.broadcast_parameters(...); hvd.DistributedOptimizer(...); hvd.broadcast_optimizer_state(...)
After:   paratrain run --nproc-per-node 2 examples/migrate/horovod.py
"""

import argparse

import torch
import torch.nn.functional as F
from reviews import BagOfWords, make_reviews

import paratrain as pt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    rt = pt.Runtime(strategy="ddp", seed=42)  # hvd.init(), set_device(hvd.local_rank())
    train = rt.loader(make_reviews(1200, seed=0), batch_size=32, shuffle=True)  # hvd.size()/hvd.rank() sharding
    dev = rt.loader(make_reviews(300, seed=1), batch_size=100, exact=True)
    model = BagOfWords()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # broadcast_parameters + DistributedOptimizer + broadcast_optimizer_state, in one call:
    # every rank starts from rank 0's weights and gradients are averaged in backward.
    model, optimizer = rt.setup(model, optimizer)
    for epoch in range(args.epochs):
        model.train()
        for ids, labels in train:
            loss = F.cross_entropy(model(ids), labels)
            rt.backward(loss)
            rt.step(optimizer)
        pt.print(f"【train】 epoch:{epoch + 1}/{args.epochs} loss:{pt.all_reduce(loss.detach(), 'mean'):.6f}")
    model.eval()
    with torch.no_grad():
        scores = [(model(ids).argmax(1), labels) for ids, labels in dev]
    preds, labels = rt.gather(torch.cat([p for p, _ in scores]), torch.cat([y for _, y in scores]))
    pt.print(f"【dev】 accuracy:{pt.accuracy(preds, labels):.4f} on {len(labels)} reviews")
    rt.close()


if __name__ == "__main__":
    main()
