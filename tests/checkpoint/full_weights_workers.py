"""pt.spawn workers: full weights from inside a script (rt.full_state_dict / rt.save_weights)."""

from __future__ import annotations

import gc

import torch

import paratrain as pt
from tests.strategy.recipes import SEED, Net, sgd, train


def _weights_of(strategy: str, directory: str, **options) -> dict:
    rt = pt.Runtime(strategy=strategy, seed=SEED, **options)
    model = Net()
    optimizer = sgd(model.parameters())
    model, optimizer = rt.setup(model, optimizer)
    train(rt, model, optimizer, steps=3, clip=None)
    pt.Checkpointer(rt, f"{directory}/{strategy}/checkpoints", model=model, optimizer=optimizer).save(step=3)
    path = rt.save_weights(model, f"{directory}/{strategy}/model.safetensors")
    full = rt.full_state_dict(model)
    return {
        "path": str(path),
        "keys": sorted(full),
        "plain": all(type(t) is torch.Tensor and t.device.type == "cpu" for t in full.values()),
        "other_ranks_empty": pt.all_gather_object(len(full))[1:] == [0] * (rt.world_size - 1),
        "sum": {k: float(v.double().sum()) for k, v in full.items()},
    }


def full_weights_job(directory: str, strategies: list[str]) -> dict:
    group = pt.Runtime(strategy="ddp", seed=SEED)  # owns the process group the variants share
    try:
        out = {}
        for strategy in strategies:
            options = {"zero_stage": 3} if strategy == "deepspeed" else {}
            out[strategy] = _weights_of(strategy, directory, **options)
        return out
    finally:
        gc.collect()
        group.close()
