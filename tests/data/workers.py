"""Datasets and pt.spawn worker functions for the data and metrics tests.

Spawned children import this module by name. Each worker bundles many checks into
one run and returns plain data that the tests assert on.
"""

from __future__ import annotations

import io

import torch
from torch.utils.data import Dataset

import paratrain as pt

# ---- datasets --------------------------------------------------------------------------


class IndexDataset(Dataset):
    """Sample i is {"id": i, "noise": a random number from the loading process's RNG}."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"id": i, "noise": torch.rand(())}


class ScoredDataset(Dataset):
    """A fixed classification problem: features, labels, and a fixed linear 'model'."""

    classes = 3

    def __init__(self, n: int):
        generator = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, 5, generator=generator, dtype=torch.float64)
        self.y = torch.randint(0, self.classes, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict:
        return {"id": i, "x": self.x[i], "y": self.y[i]}


def model_weights() -> torch.Tensor:
    return torch.randn(5, ScoredDataset.classes, generator=torch.Generator().manual_seed(99), dtype=torch.float64)


def predict(x: torch.Tensor) -> torch.Tensor:
    return x @ model_weights()


# ---- shared by the workers and the single-process tests ----------------------------


def ids(batches) -> list[list[int]]:
    return [batch["id"].tolist() for batch in batches]


def roundtrip(state: dict) -> dict:
    """Through torch.save / torch.load(weights_only=True), as a checkpoint would."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def resume_case(make, epochs: int, stop_epoch: int, stop_after: int) -> dict:
    """An uninterrupted run vs. a run stopped after `stop_after` batches of `stop_epoch` and resumed.

    `make()` builds a fresh loader (same arguments each time).
    """
    full_loader = make()
    full = [ids(full_loader) for _ in range(epochs)]

    stopped = make()
    for epoch in range(stop_epoch + 1):
        batches = iter(stopped)
        for step in range(stop_after if epoch == stop_epoch else len(stopped)):
            batch = next(batches)
            if epoch == 0 and step == 0:
                noise_epoch0 = batch["noise"].tolist()
    state = roundtrip(stopped.state_dict())
    del stopped, batches

    resumed_loader = make()
    resumed_loader.load_state_dict(state)
    lengths = [len(resumed_loader)]
    resumed = []
    for _ in range(state["epoch"], epochs):
        resumed += ids(resumed_loader)
        lengths.append(len(resumed_loader))
    del resumed_loader
    # The same state, but the loop sets each epoch itself (as users of DistributedSampler do).
    explicit_loader = make()
    explicit_loader.load_state_dict(state)
    explicit = []
    for epoch in range(state["epoch"], epochs):
        explicit_loader.set_epoch(epoch)
        explicit += ids(explicit_loader)
    del explicit_loader

    fresh = make()
    return {
        "full": full,
        "resumed": resumed,
        "explicit": explicit,
        "state": state,
        "lengths": lengths,
        "noise_epoch0": noise_epoch0,
        "noise_epoch0_rerun": next(iter(fresh))["noise"].tolist(),
    }


def evaluate(rt, n: int, batch_size: int) -> dict:
    """Exact evaluation of the fixed model on n samples, gathered in dataset order."""
    loader = rt.loader(ScoredDataset(n), batch_size=batch_size, exact=True)
    preds, labels, sample_ids, names, losses = [], [], [], [], pt.RunningMean()
    for batch in loader:
        logits = predict(batch["x"])
        preds.append(logits.argmax(1))
        labels.append(batch["y"])
        sample_ids.append(batch["id"])
        names += [f"s{i}" for i in batch["id"].tolist()]
        loss = torch.nn.functional.cross_entropy(logits, batch["y"])
        losses.update(loss, count=len(batch["y"]))
    # A rank with an empty shard has nothing to concatenate: an empty float tensor.
    cat = lambda parts: torch.cat(parts) if parts else torch.tensor([])  # noqa: E731
    preds, labels, sample_ids = rt.gather(cat(preds), cat(labels), cat(sample_ids))
    out = {
        "shard": len(loader.sampler),
        "batches": len(loader),
        "ids": sample_ids.tolist(),
        "preds": preds.tolist(),
        "labels": labels.tolist(),
        "dtype": str(preds.dtype),
        "names": rt.gather(names),
        "names_on_0": rt.gather(names, dst=0),
        "loss": losses.compute(),
        "accuracy": pt.accuracy(preds, labels),
    }
    if len(preds):
        out["report"] = pt.classification_report(preds, labels, target_names=["neg", "neu", "pos"]).to_dict()
    return out


def _raised(fn) -> str:
    try:
        fn()
    except pt.DataError as exc:
        return str(exc)
    return "no error"


# ---- workers ----------------------------------------------------------------------------


def two_rank_checks() -> dict:
    """Everything the 2-rank test asserts on, in one run."""
    rt = pt.Runtime(seed=0)
    try:
        r = rt.rank
        out: dict = {"rank": r}
        # 3 epochs of a shuffled training loader over 40 samples, batch 4.
        train = rt.loader(IndexDataset(40), batch_size=4, shuffle=True, seed=7)
        out["epochs"] = rt.all_gather_object([sum(ids(train), []) for _ in range(3)])
        out["len"] = rt.all_gather_object(len(train))

        # Resume after 3 batches of epoch 1 (37 samples: padded, with a last partial batch).
        cases = {
            "shuffled": dict(shuffle=True, seed=5),
            "ordered": dict(shuffle=False),
            # pt.spawn children default to the spawn start method, under which every loader
            # worker re-imports torch (~2 s each); torchrun's workers default to fork.
            "workers": dict(shuffle=True, seed=5, num_workers=2, multiprocessing_context="fork"),
        }
        for name, options in cases.items():
            make = lambda: rt.loader(IndexDataset(37), batch_size=4, **options)  # noqa: E731
            out[f"resume_{name}"] = rt.all_gather_object(resume_case(make, epochs=3, stop_epoch=1, stop_after=3))
        # A state taken after the last batch of an epoch resumes at the next epoch.
        make = lambda: rt.loader(IndexDataset(37), batch_size=4, shuffle=True, seed=5)  # noqa: E731
        out["resume_at_end"] = rt.all_gather_object(resume_case(make, epochs=3, stop_epoch=0, stop_after=5))

        # Bad input on two ranks: lengths that differ, fewer samples than ranks.
        out["mismatch"] = rt.all_gather_object(_raised(lambda: rt.loader(IndexDataset(20 - r), batch_size=4)))
        out["too_few"] = rt.all_gather_object(_raised(lambda: rt.loader(IndexDataset(1), batch_size=4, shuffle=True)))

        # Exact evaluation: 101 samples, and 1 sample (rank 1's shard is empty).
        out["eval"] = rt.all_gather_object(evaluate(rt, 101, batch_size=8))
        out["eval_tiny"] = rt.all_gather_object(evaluate(rt, 1, batch_size=8))

        # Global-batch means: rank 0 has mean 1.0 over 1 sample, rank 1 mean 4.0 over 3.
        value, count = (1.0, 1) if r == 0 else (4.0, 3)
        out["global_mean"] = pt.global_mean(value, count)
        out["global_mean_tensor"] = pt.global_mean(torch.tensor(value), count)
        running = pt.RunningMean()
        for _ in range(count):
            running.update(torch.tensor(value), 1)
        out["running_mean"] = running.compute()
        out["objects"] = rt.gather({"rank": r})
        return out
    finally:
        rt.close()


def three_rank_checks(single_rank_state: dict) -> dict:
    """Exact evaluation on 3 ranks, and a 1-rank training state resumed on 3 ranks."""
    rt = pt.Runtime(seed=0)
    try:
        out: dict = {}
        out["eval"] = rt.all_gather_object(evaluate(rt, 101, batch_size=8))
        out["eval_tiny"] = rt.all_gather_object(evaluate(rt, 2, batch_size=8))
        train = rt.loader(IndexDataset(37), batch_size=4, shuffle=True, seed=5)
        train.load_state_dict(single_rank_state)
        rest_of_epoch = sum(ids(train), [])
        next_epoch = sum(ids(train), [])
        out["elastic"] = rt.all_gather_object({"rest": rest_of_epoch, "next": next_epoch, "epoch": train.epoch})
        return out
    finally:
        rt.close()
