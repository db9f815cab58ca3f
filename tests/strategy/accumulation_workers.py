"""pt.spawn workers for gradient accumulation: both forms, epoch ends, checkpoints, resume.

One 2-process job runs every variant (a process start costs seconds); rank 0's
results come back as plain Python values.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import paratrain as pt
from tests.strategy.recipes import BATCH, SEED, Net, dataset, flat_state, sgd

#: 7 batches per rank per epoch: 2 ranks × 7 × BATCH samples.
BATCHES_PER_EPOCH = 7
EPOCH_SAMPLES = 2 * BATCHES_PER_EPOCH * BATCH


def train_form(strategy: str, form: str, steps: int = 5, accumulate: int = 4) -> dict:
    """``steps`` optimizer steps of ``accumulate`` micro-batches, with ``steps=`` or ``sync=``."""
    rt = pt.Runtime(strategy=strategy, seed=SEED)
    model = Net()
    optimizer = sgd(model.parameters())
    model, optimizer = rt.setup(model, optimizer)
    world, rank = rt.world_size, rt.rank
    per_step = BATCH * world * accumulate
    x, y = dataset(per_step * steps)
    for step in range(steps):
        for micro in range(accumulate):
            start = step * per_step + (micro * world + rank) * BATCH
            options = {"steps": accumulate} if form == "steps" else {"sync": micro == accumulate - 1}
            with rt.accumulate(model, **options):
                rt.backward(F.mse_loss(model(x[start : start + BATCH]), y[start : start + BATCH]))
                rt.step(optimizer)
    return flat_state(rt.strategy.model_state_dict(model))


def loader_data() -> torch.utils.data.TensorDataset:
    x, y = dataset(EPOCH_SAMPLES)
    return torch.utils.data.TensorDataset(x, y)


def steps_per_epoch(strategy: str = "ddp", epochs: int = 2) -> dict:
    """7 micro-batches per epoch with steps=2: after which micro-batches did the weights change?"""
    rt = pt.Runtime(strategy=strategy, seed=SEED)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = rt.setup(model, optimizer)
    loader = rt.loader(loader_data(), batch_size=BATCH)  # in order: global batch i = samples [8i, 8i+8)
    stepped = []
    for _ in rt.epochs(0, total=epochs):
        changed = []
        for index, (xb, yb) in enumerate(loader):
            before = [p.detach().clone() for p in model.parameters()]
            with rt.accumulate(model, steps=2):
                rt.backward(F.mse_loss(model(xb), yb))
                rt.step(optimizer)
            if any(not torch.equal(b, p) for b, p in zip(before, model.parameters())):
                changed.append(index)
        stepped.append(changed)
    return {"stepped": stepped, "state": flat_state(rt.strategy.model_state_dict(model))}


def resumable_run(directory: str, strategy: str, stop_at: tuple[int, int] | None, resume: bool, epochs: int = 3) -> dict:
    """Shuffled loader, steps=2, momentum; a checkpoint after every step. ``stop_at=(epoch, step)`` stops there."""
    rt = pt.Runtime(strategy=strategy, seed=SEED)
    model = Net()
    optimizer = sgd(model.parameters())
    model, optimizer = rt.setup(model, optimizer)
    loader = rt.loader(loader_data(), batch_size=BATCH, shuffle=True)
    ckpt = pt.Checkpointer(rt, directory, model=model, optimizer=optimizer, loader=loader, keep_last=1)
    state = ckpt.resume() if resume else None
    step = state.step if state else 0
    for epoch in rt.epochs(state, total=epochs):
        for xb, yb in loader:
            noise = 0.01 * torch.randn_like(xb)  # the restored generators must give the same noise
            with rt.accumulate(model, steps=2):
                rt.backward(F.mse_loss(model(xb + noise), yb))
                stepped = rt.step(optimizer, clip_norm=10.0)
            if stepped:
                step += 1
                ckpt.save(step=step, epoch=epoch)
                if stop_at == (epoch, step):
                    return {"stopped": step}
    return {"steps": step, "state": flat_state(rt.strategy.model_state_dict(model))}


def save_while_pending(directory: str) -> str:
    rt = pt.Runtime(strategy="ddp", seed=SEED)
    model = Net()
    optimizer = sgd(model.parameters())
    model, optimizer = rt.setup(model, optimizer)
    ckpt = pt.Checkpointer(rt, directory, model=model, optimizer=optimizer)
    x, y = dataset(BATCH)
    with rt.accumulate(model, steps=2):
        rt.backward(F.mse_loss(model(x), y))
        rt.step(optimizer)
    try:
        ckpt.save(step=1)
    except pt.ConfigError as exc:
        return str(exc)
    return "saved"


def fsdp_optimizer_not_given() -> str:
    rt = pt.Runtime(strategy="fsdp", seed=SEED)
    model = Net()
    optimizer = sgd(model.parameters())  # built before setup, then not passed to it
    model = rt.setup(model)
    x, y = dataset(BATCH)
    rt.backward(F.mse_loss(model(x), y))
    try:
        rt.step(optimizer)
    except pt.ConfigError as exc:
        return str(exc)
    return "stepped"


def accumulation_job(directory: str) -> dict:
    """Every accumulation variant in one 2-process job; rank 0's results (each rank checks its own errors)."""
    group = pt.Runtime(strategy="ddp", seed=SEED)  # owns the process group the variants share
    try:
        out = {}
        for strategy in ("ddp", "fsdp"):
            for form in ("steps", "sync"):
                out[f"{strategy}_{form}"] = train_form(strategy, form)
        out["per_epoch"] = steps_per_epoch()
        out["uninterrupted"] = resumable_run(f"{directory}/whole", "ddp", None, False)
        resumable_run(f"{directory}/parts", "ddp", (1, 6), False)  # stops mid-epoch 1, after its 2nd step
        out["resumed"] = resumable_run(f"{directory}/parts", "ddp", None, True)
        out["pending"] = save_while_pending(f"{directory}/pending")
        out["fsdp_optimizer"] = fsdp_optimizer_not_given()
        errors = pt.all_gather_object((out["pending"], out["fsdp_optimizer"]))
        out["errors_on_every_rank"] = all(e == errors[0] for e in errors)
        return out
    finally:
        group.close()
