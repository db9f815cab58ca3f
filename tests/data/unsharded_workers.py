"""pt.spawn worker for the unsharded-loader warning (spawned children import it by name)."""

from __future__ import annotations

import warnings

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import paratrain as pt


def train_on_each_kind_of_loader():
    """Iterate four loaders with training steps or without; return rank 0's warnings and rank 1's count."""
    rt = pt.Runtime(strategy="ddp", seed=0)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt = rt.setup(model, opt)
    whole_train = DataLoader(data, batch_size=8, shuffle=True)  # the two-machine MNIST tutorial's loader
    whole_eval = DataLoader(data, batch_size=8)
    sampled = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    sharded = rt.loader(data, batch_size=8, shuffle=True)

    def train(loader, model=model, opt=opt):
        for x, y in loader:
            rt.backward(torch.nn.functional.mse_loss(model(x), y))
            rt.step(opt)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # two epochs: still one warning
            train(whole_train)
        with torch.no_grad():
            for x, _ in whole_eval:  # every rank evaluates everything: no step, no warning
                model(x)
        train(sampled)
        train(sharded)
    messages = [str(w.message) for w in caught if w.category.__name__ == "UnshardedLoaderWarning"]
    per_rank = pt.all_gather_object(len(messages))
    del model, opt, train
    rt.close()
    patched = DataLoader.__iter__.__name__
    return {"messages": messages, "per_rank": per_rank, "iter_after_close": patched}
