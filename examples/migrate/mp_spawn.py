"""The BERT multi-GPU comparison's mp.spawn script (multi-gpu-distributed-mp-amp-cls.py), converted.

Before:  mp.spawn(main_worker, nprocs=2, args=(args,)) and, in each worker,
         dist.init_process_group("nccl", init_method="tcp://localhost:12345", world_size=2, rank=local_rank)
After:   pt.spawn(main_worker, nprocs=2, args=(args,)); pt.Runtime() in the worker.

    python examples/migrate/mp_spawn.py --nprocs 2
"""

import argparse

import torch
import torch.nn.functional as F
from reviews import MOODS, BagOfWords, make_reviews  # beside this file

import paratrain as pt


def main_worker(args):
    # No rank argument, no tcp://localhost:12345: the rendezvous is on a free loopback port.
    rt = pt.Runtime(strategy="ddp", precision="bf16-mixed", seed=42)  # torch.cuda.amp → precision
    train = rt.loader(make_reviews(1200, seed=0), batch_size=32, shuffle=True)
    dev = rt.loader(make_reviews(300, seed=1), batch_size=100, exact=True)
    model = BagOfWords()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model, optimizer = rt.setup(model, optimizer)
    for epoch in range(args.epochs):
        model.train()
        for step, (ids, labels) in enumerate(train, start=1):
            with rt.autocast():
                loss = F.cross_entropy(model(ids), labels)
            rt.backward(loss)  # no dist.barrier() before each step: DDP already synchronises
            rt.step(optimizer)
            if step % 10 == 0:
                pt.print(f"【train】 epoch:{epoch + 1}/{args.epochs} step:{step}/{len(train)} "
                         f"loss:{pt.all_reduce(loss.detach().float(), 'mean'):.6f}")
    model.eval()
    with torch.no_grad():
        scores = [(model(ids).argmax(1), labels) for ids, labels in dev]
    preds, labels = rt.gather(torch.cat([p for p, _ in scores]), torch.cat([y for _, y in scores]))
    accuracy = pt.accuracy(preds, labels)
    pt.print(pt.classification_report(preds, labels, target_names=MOODS))
    result = {"world_size": rt.world_size, "dev_samples": len(labels), "accuracy": accuracy}
    del model, optimizer
    rt.close()
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nprocs", type=int, default=2)  # was --local_world_size
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    print(pt.spawn(main_worker, nprocs=args.nprocs, args=(args,)))  # rank 0's return value
