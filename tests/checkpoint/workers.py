"""A small training recipe that uses every random generator, and pt.spawn workers around it.

The recipe draws from torch (dropout, noise), NumPy and Python's ``random`` each
step, with per-rank seeds, through a shuffled resumable loader and an LR schedule,
so a resumed run matches an uninterrupted one only if the model, optimizer,
schedule, data position and every rank's generators are all restored.
"""

from __future__ import annotations

import gc
import os
import random
import warnings

import numpy as np
import torch

import paratrain as pt
from paratrain.checkpoint.writer_lock import LOCK_FILE
from paratrain.goodput.ledger import LEDGER_FILE
from paratrain.checkpoint import Checkpointer
from paratrain.seeding import seed_per_rank

SAMPLES, BATCH, EPOCHS, SEED = 40, 4, 3, 7


class Net(torch.nn.Module):
    def __init__(self, hidden: int = 16):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(6, hidden), torch.nn.Linear(hidden, hidden)])
        self.drop = torch.nn.Dropout(0.2)
        self.head = torch.nn.Linear(hidden, 3)

    def forward(self, x):
        for block in self.blocks:
            x = self.drop(torch.relu(block(x)))
        return self.head(x)


def dataset():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(SAMPLES, 6, generator=generator)
    return torch.utils.data.TensorDataset(inputs, torch.randint(0, 3, (SAMPLES,), generator=generator))


def build(rt, init_seed: int):
    """Model, optimizer, schedule and loader, freshly made (``init_seed`` changes the initial weights)."""
    torch.manual_seed(init_seed)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    model, optimizer = rt.setup(model, optimizer)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.7)
    loader = rt.loader(dataset(), batch_size=BATCH, shuffle=True)
    return model, optimizer, schedule, loader


def train_step(rt, model, optimizer, schedule, x, y) -> None:
    x = x + 0.01 * torch.randn_like(x) + 0.01 * float(np.random.rand()) + 0.01 * random.random()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    rt.backward(loss)
    rt.step(optimizer)
    schedule.step()


def run(rt, directory: str | None, stop_after: int | None = None, resume: bool = False, init_seed: int = 1) -> dict:
    """Train for EPOCHS (or until ``stop_after`` steps, then save and stop); return what happened."""
    model, optimizer, schedule, loader = build(rt, init_seed)
    seed_per_rank(SEED, rt.rank)
    ckpt = Checkpointer(rt, directory, model=model, optimizer=optimizer, scheduler=schedule, loader=loader) if directory else None
    state = None
    if resume:
        # Scramble every generator first: only a restored checkpoint can bring them back.
        seed_per_rank(SEED + 1000, rt.rank)
        state = ckpt.resume()
    step = state.step if state else 0
    for epoch in rt.epochs(state, total=EPOCHS):
        for x, y in loader:
            train_step(rt, model, optimizer, schedule, x, y)
            step += 1
            if step == stop_after:
                path = ckpt.save(step=step, epoch=epoch)
                return {"stopped_at": step, "epoch": epoch, "path": str(path), "params": full_params(rt, model)}
    return {
        "steps": step,
        "resumed_epoch": state.epoch if state else None,
        "params": full_params(rt, model),
        "objects": (model, optimizer, schedule, loader),
    }


def full_params(rt, model) -> dict[str, torch.Tensor]:
    """Whole tensors of the model (gathered for fsdp; collective), cloned to CPU."""
    return {k: v.detach().cpu().clone() for k, v in rt.strategy.model_state_dict(model).items()}


def equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


# ---- pt.spawn workers (2+ ranks) -----------------------------------------------------------------


def in_runtime(strategy: str, body, *args) -> dict:
    """Run ``body(rt, *args)`` in a Runtime, freeing its wrapped models before the group closes.

    A DDP model freed after ``rt.close()`` is the last owner of the gloo process
    group, and its destructor joins gloo's worker thread while holding the GIL,
    which that thread may need: a deadlock at exit (pytorch/pytorch#56297).
    """
    rt = pt.Runtime(strategy=strategy, seed=SEED)
    try:
        return body(rt, *args)  # its locals (the models) are released when it returns
    finally:
        gc.collect()
        rt.close()


def ddp_resume(directory: str) -> dict:
    """Uninterrupted vs stopped-at-step-7-and-resumed, plus failure agreement; 2 ranks."""
    return in_runtime("ddp", _ddp_resume, directory)


def _ddp_resume(rt, directory: str) -> dict:
    whole = run(rt, None)
    stopped = run(rt, directory, stop_after=7)
    resumed = run(rt, directory, resume=True, init_seed=3)
    from safetensors.torch import load_file

    saved_keys = sorted(load_file(os.path.join(stopped["path"], "model.safetensors")))
    result = {
        "rank": rt.rank,
        "equal": equal(whole["params"], resumed["params"]),
        "differs_at_stop": not equal(whole["params"], stopped["params"]),
        "steps": resumed["steps"],
        "resumed_epoch": resumed["resumed_epoch"],
        "saved_keys": saved_keys,
        "failure": failure_on_writer(rt, directory, resumed["objects"][0]),
        "files_after_failure": sorted(f for f in os.listdir(directory) if f not in (LOCK_FILE, LEDGER_FILE)),
        "background": background_failures(rt, os.path.join(directory, "background"), resumed["objects"][0]),
    }
    return all_ranks(result)


def background_failures(rt, directory: str, model) -> dict:
    """Background saves whose check fails on one rank, as the fit loop's do: at step 6 rank 1's weights are
    not finite (rank 0's, the ones it copies, are), at step 12 rank 0's run directory was moved away. What
    each save and close() raised (None: returned), the weights saved at step 10, and the checkpoints left."""
    from paratrain.loop.out_dir import check_still_there, directory_identity

    run_dir = os.path.join(directory, "run")
    os.makedirs(run_dir, exist_ok=True)
    identity = directory_identity(run_dir)
    ckpt = Checkpointer(rt, os.path.join(directory, "checkpoints"), keep_last=None, model=model, background=True)
    parameter = next(model.parameters())
    raised: dict[str, str | None] = {}

    def check(step: int):
        def run() -> None:  # every rank: its own weights finite; rank 0: its run directory still its own
            if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
                raise pt.CheckpointError(f"non-finite weights on this rank at step {step}")
            if rt.rank == 0:
                check_still_there(run_dir, identity, step)
        return run

    weights_10 = None
    for step in (2, 4, 6, 8, 10, 12):
        kept = parameter.detach().clone()
        if step == 6 and rt.rank == 1:
            with torch.no_grad():
                parameter[0] = float("nan")
        if step == 12 and rt.rank == 0:
            os.rename(run_dir, run_dir + "-moved")
            os.makedirs(run_dir)
        try:
            ckpt.save(step=step, check=check(step))
            raised[str(step)] = None
        except pt.CheckpointError as exc:
            raised[str(step)] = str(exc)
        with torch.no_grad():
            parameter.copy_(kept)  # finite again on every rank
        if step == 10:
            weights_10 = {k: v.detach().clone() for k, v in model.state_dict().items()}
            with torch.no_grad():
                parameter.add_(1.0)  # after the save: not in the checkpoint being written
    try:
        ckpt.close()
        raised["close"] = None
    except pt.CheckpointError as exc:
        raised["close"] = str(exc)
    from safetensors.torch import load_file

    saved = load_file(os.path.join(directory, "checkpoints", "step-000010", "model.safetensors")) \
        if os.path.isdir(os.path.join(directory, "checkpoints", "step-000010")) else {}
    return {
        "raised": raised,
        "complete": [path.name for path in ckpt.checkpoints()],
        "step_10_exact": bool(saved) and all(torch.equal(saved[k.removeprefix("module.")], v)
                                             for k, v in weights_10.items()),
    }


def late_rank(directory: str) -> dict:
    """Rank 1 hangs (sleeps past ``PARATRAIN_TIMEOUT``) instead of taking part in the background save at step 6:
    what rank 0's next save raised, and the checkpoints left. 2 ranks."""
    return in_runtime("ddp", _late_rank, directory)


def _late_rank(rt, directory: str) -> dict:
    import time

    from paratrain import comm

    model, *_ = build(rt, 1)
    ckpt = Checkpointer(rt, directory, model=model, background=True)
    ckpt.save(step=2)  # the first one: in the foreground
    ckpt.save(step=4)
    raised = None
    if rt.rank == 0:
        ckpt.save(step=6)  # returns at once; its thread waits for rank 1
        try:
            ckpt.save(step=8)
        except pt.ParatrainError as exc:
            raised = f"{type(exc).__name__}: {exc}"
    else:  # hangs through rank 0's wait (declared, so that the stall watchdog does not end the job first)
        with rt.busy("hanging where a save is", limit=comm.DEFAULT_TIMEOUT_S + 6):
            time.sleep(comm.DEFAULT_TIMEOUT_S + 4)
    return {"rank": rt.rank, "raised": raised, "complete": [path.name for path in ckpt.checkpoints()]}


class FailsOnRankZero:
    """A stateful object whose state_dict() raises on rank 0, the rank that writes."""

    def __init__(self, rank: int):
        self.rank = rank

    def state_dict(self):
        if self.rank == 0:
            raise RuntimeError("state unavailable on this rank")
        return {"ok": 1}

    def load_state_dict(self, state):
        pass


def failure_on_writer(rt, directory: str, model) -> str:
    """Rank 0 fails while writing; rank 1 must get the same CheckpointError, not wait forever."""
    ckpt = Checkpointer(rt, directory, model=model, oddball=FailsOnRankZero(rt.rank))
    try:
        ckpt.save(step=99)
    except pt.CheckpointError as exc:
        return str(exc)
    return "no error"


def all_ranks(result: dict) -> dict:
    """Every rank's result dict, gathered onto the returned one (rank 0's)."""
    return {"ranks": pt.all_gather_object(result)}


def full_optimizer(model, optimizer) -> dict:
    """Whole optimizer state on rank 0 (collective for fsdp)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    state = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {name: {k: v.clone() for k, v in values.items()} for name, values in state.get("state", {}).items()}


def fsdp_resume_and_save(resume_dir: str, sharded_dir: str) -> dict:
    """fsdp on 2 ranks: resume equivalence, then a sharded checkpoint for resharding, then a
    failure on rank 1 before the shards are written."""
    return in_runtime("fsdp", _fsdp_resume_and_save, resume_dir, sharded_dir)


def _fsdp_resume_and_save(rt, resume_dir: str, sharded_dir: str) -> dict:
    whole = run(rt, None)
    run(rt, resume_dir, stop_after=7)
    resumed = run(rt, resume_dir, resume=True, init_seed=3)
    model, optimizer, schedule, loader = resumed["objects"]
    ckpt = Checkpointer(rt, sharded_dir, model=model, optimizer=optimizer, scheduler=schedule, loader=loader)
    path = ckpt.save(step=resumed["steps"], epoch=EPOCHS - 1, metrics={"loss": 0.5})
    listing = sorted(os.listdir(path)), sorted(os.listdir(os.path.join(path, "sharded")))
    failure = failure_before_shards(rt, ckpt)
    return {
        "max_diff": max_diff(whole["params"], resumed["params"]) if rt.is_main else 0.0,
        "steps": resumed["steps"],
        "params": resumed["params"],
        "optimizer": full_optimizer(model, optimizer),
        "path": str(path),
        "listing": listing,
        "failure": pt.all_gather_object(failure),
        "after_failure": sorted(f for f in os.listdir(sharded_dir) if f not in (LOCK_FILE, LEDGER_FILE)),
    }


def failure_before_shards(rt, ckpt) -> str:
    """Rank 1's disk check fails (simulated): every rank raises, no rank enters the DCP write."""
    from paratrain.checkpoint import saving

    real_check = saving.check_free_space

    def full_disk_on_rank_one(directory, needed):
        if rt.rank == 1:
            raise pt.CheckpointError(f"not enough disk space for a checkpoint in {directory} (simulated)")
        real_check(directory, needed)

    saving.check_free_space = full_disk_on_rank_one
    try:
        ckpt.save(step=1000)
    except pt.CheckpointError as exc:
        return str(exc)
    finally:
        saving.check_free_space = real_check
    return "no error"


def fsdp_load(directory: str, one_file_directory: str) -> dict:
    """Load a 2-rank sharded checkpoint into fsdp at this world size (3): DCP reshards.
    Then load a one-file (single-process) checkpoint into the same fsdp model."""
    return in_runtime("fsdp", _fsdp_load, directory, one_file_directory)


def _fsdp_load(rt, directory: str, one_file_directory: str) -> dict:
    model, optimizer, schedule, loader = build(rt, init_seed=5)
    ckpt = Checkpointer(rt, directory, model=model, optimizer=optimizer, scheduler=schedule, loader=loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = ckpt.resume()
    params = full_params(rt, model)
    optimizer_state = full_optimizer(model, optimizer)
    # The loaded model and optimizer train on: one more step on every rank.
    x, y = next(iter(loader))
    train_step(rt, model, optimizer, schedule, x, y)
    trained = not equal(params, full_params(rt, model))
    Checkpointer(rt, one_file_directory, model=model, optimizer=optimizer).resume()
    return {
        "world_size": rt.world_size,
        "step": state.step,
        "epoch": state.epoch,
        "params": params,
        "optimizer": optimizer_state,
        "warnings": [str(w.message) for w in caught],
        "trained": trained,
        "one_file_params": full_params(rt, model),
        "one_file_optimizer": full_optimizer(model, optimizer),
    }
