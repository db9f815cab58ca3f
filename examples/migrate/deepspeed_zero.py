"""The BERT multi-GPU comparison's DeepSpeed script (multi-gpu-deepspeed-cls.py), converted.

Before:  deepspeed --master_port 11222 multi-gpu-deepspeed-cls.py
         model_engine, optimizer, _, _ = deepspeed.initialize(config_params=config, model=model, ...)
         model_engine.backward(loss); model_engine.step()
         then zero_to_fp32.py to get a whole model out of the ZeRO-3 checkpoint
After:   paratrain run --nproc-per-node 2 examples/migrate/deepspeed_zero.py
         checkpoints hold whole tensors; `paratrain ckpt export` writes one safetensors file
"""

import argparse

import torch
import torch.nn.functional as F
from reviews import BagOfWords, make_reviews

import paratrain as pt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--zero-stage", type=int, default=2)
    parser.add_argument("--out", default="runs/deepspeed")
    args = parser.parse_args()

    # The config dict's micro-batch and optimizer become the loader and a torch optimizer.
    rt = pt.Runtime(strategy="deepspeed", zero_stage=args.zero_stage, seed=42)
    train = rt.loader(make_reviews(1200, seed=0), batch_size=32, shuffle=True)
    dev = rt.loader(make_reviews(300, seed=1), batch_size=100, exact=True)
    model = BagOfWords()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer = rt.setup(model, optimizer)
    ckpt = pt.Checkpointer(rt, f"{args.out}/checkpoints", model=model, optimizer=optimizer, loader=train)
    state = ckpt.resume()
    for epoch in rt.epochs(state, total=args.epochs):
        model.train()
        for ids, labels in train:
            loss = F.cross_entropy(model(ids), labels)
            rt.backward(loss)  # model_engine.backward(loss)
            rt.step(optimizer)  # model_engine.step()
        model.eval()
        with torch.no_grad():  # the original scored every batch on every GPU: exact=True shards evaluation
            scores = [(model(ids).argmax(1), labels) for ids, labels in dev]
        preds, labels = rt.gather(torch.cat([p for p, _ in scores]), torch.cat([y for _, y in scores]))
        accuracy = pt.accuracy(preds, labels)
        pt.print(f"epoch {epoch + 1}: ZeRO-{args.zero_stage} dev accuracy {accuracy:.4f} on {len(labels)} reviews")
        ckpt.save(epoch=epoch, metrics={"accuracy": accuracy})
    rt.close()


if __name__ == "__main__":
    main()
