"""Top-level worker functions for the strategy tests (spawned children import them).

Each worker runs many variants in one 2-process job (a process start costs ~3 s)
and returns rank 0's results as plain Python values.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.tensor import DTensor

import paratrain as pt
from tests.strategy.recipes import SEED, Net, flat_state, sgd, train


def _run(strategy: str, *, optimizer_first: bool = False, sync_batchnorm: bool = False, batchnorm: bool = False,
         **train_options) -> tuple[pt.Runtime, torch.nn.Module, dict]:
    """Build, set up and train one variant; return its runtime, model and results."""
    rt = pt.Runtime(strategy=strategy, seed=SEED, sync_batchnorm=sync_batchnorm)
    model = Net(batchnorm=batchnorm)
    if optimizer_first:  # the order users get wrong with FSDP: optimizer over the unsharded parameters
        optimizer = sgd(model.parameters())
        model, optimizer = rt.setup(model, optimizer)
    else:
        model = rt.setup(model)
        optimizer = sgd(model.parameters())
    rounds = _count_allreduces(model) if strategy == "ddp" else None
    result = train(rt, model, optimizer, **train_options)
    result["state"] = flat_state(rt.strategy.model_state_dict(model))
    if rounds is not None:
        result["allreduce_rounds"] = rounds[0]
    result["optimizer_params_sharded"] = all(isinstance(p, DTensor) for g in optimizer.param_groups for p in g["params"])
    return rt, model, result


def _count_allreduces(ddp_model) -> list[int]:
    """Register a comm hook that counts gradient all-reduce rounds (one per last bucket)."""
    rounds = [0]

    def counting_allreduce(group, bucket):
        if bucket.is_last():
            rounds[0] += 1
        return default_hooks.allreduce_hook(group, bucket)

    ddp_model.register_comm_hook(dist.group.WORLD, counting_allreduce)
    return rounds


def strategies_train_alike():
    """ddp, fsdp, both with accumulation, ddp with and without SyncBN: rank 0's losses, norms, weights."""
    group = pt.Runtime(strategy="ddp", seed=SEED)  # owns the process group the variants share
    try:
        out = {}
        _, _, out["ddp"] = _run("ddp")
        _, model, out["fsdp"] = _run("fsdp", optimizer_first=True)
        out["fsdp"]["local_numel"] = sum(p.to_local().numel() for p in model.parameters())
        out["fsdp"]["full_numel"] = sum(p.numel() for p in model.parameters())
        _, _, out["ddp_accum"] = _run("ddp", accumulate=4, steps=5)
        _, _, out["fsdp_accum"] = _run("fsdp", accumulate=4, steps=5)
        for label, sync in [("syncbn", True), ("plain_bn", False)]:
            rt, model, result = _run("ddp", sync_batchnorm=sync, batchnorm=True, steps=5)
            bn = rt.unwrap(model).norm
            result["bn_class"] = type(bn).__name__
            out[label] = result
        return out
    finally:
        group.close()


def _error(call, *args, **kwargs) -> dict | None:
    """Run ``call(*args, **kwargs)``; return the paratrain error it raised as {type, message}, or None."""
    try:
        call(*args, **kwargs)
    except pt.ParatrainError as exc:
        return {"type": type(exc).__name__, "message": str(exc)}
    return None


class WithUnusedLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(4, 4)
        self.unused = torch.nn.Linear(4, 4)  # never called in forward
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.used(x))


def _two_steps(rt: pt.Runtime, model: torch.nn.Module) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        rt.backward(model(torch.randn(3, 4)).sum())
        rt.step(optimizer)


def weights_and_bad_input():
    """Different seeds per rank, weight checks, and every refusal a 2-process job can hit."""
    group = pt.Runtime(strategy="ddp", seed=SEED)
    try:
        rank = group.rank
        out: dict = {"dp_with_two_processes": _error(pt.Runtime, strategy="dp")}

        # Each rank seeds differently, as a script that seeds with time or rank would.
        for strategy in ("ddp", "fsdp"):
            rt = pt.Runtime(strategy=strategy, seed=None)
            torch.manual_seed(100 + rank)
            model = Net()
            rank0_initial = pt.broadcast_object(flat_state(model.state_dict()))
            out[f"{strategy}_check_before_setup"] = _error(rt.check_same_weights, model)
            model = rt.setup(model)
            out[f"{strategy}_check_after_setup"] = _error(rt.check_same_weights, model)
            # fsdp: rank 0's full state is assembled from both ranks' shards.
            full = flat_state(rt.strategy.model_state_dict(model))
            out[f"{strategy}_equals_rank0_initial"] = full == rank0_initial if rank == 0 else None
            if strategy == "ddp":
                per_rank = pt.all_gather_object(full)
                out["ddp_ranks_identical"] = all(state == per_rank[0] for state in per_rank)
            out[f"{strategy}_setup_twice"] = _error(rt.setup, model)

        # A rank that changes its weights alone is caught, naming tensor and rank.
        rt = pt.Runtime(strategy="ddp", seed=SEED)
        model = rt.setup(Net())
        if rank == 1:
            with torch.no_grad():
                rt.unwrap(model).blocks[1].linear.bias[0] += 1e-3
        out["desync_detected"] = _error(rt.check_same_weights, model)

        fsdp = pt.Runtime(strategy="fsdp", seed=SEED)
        out["fsdp_no_parameters"] = _error(lambda: fsdp.setup(torch.nn.Sequential(torch.nn.ReLU())))
        stepped = Net()
        optimizer = sgd(stepped.parameters())
        stepped(torch.randn(2, 8)).sum().backward()
        optimizer.step()
        out["fsdp_optimizer_with_state"] = _error(lambda: fsdp.setup(stepped, optimizer))
        out["fsdp_unknown_wrap_class"] = _error(
            lambda: pt.Runtime(strategy="fsdp", wrap_modules=["Nope"]).setup(Net())
        )
        by_size = pt.Runtime(strategy="fsdp", min_params=200)
        out["fsdp_blocks_by_size"] = [type(m).__name__ for m in by_size.strategy.blocks(Net())]
        named = pt.Runtime(strategy="fsdp", wrap_modules=["Block"])
        out["fsdp_blocks_by_class"] = [type(m).__name__ for m in named.strategy.blocks(Net())]

        # DDP without find_unused_parameters: the next forward fails; the error names the layer.
        rt = pt.Runtime(strategy="ddp", seed=SEED)
        out["unused_parameters"] = _error(lambda: _two_steps(rt, rt.setup(WithUnusedLayer())))
        rt = pt.Runtime(strategy="ddp", seed=SEED, find_unused_parameters=True)
        out["unused_parameters_allowed"] = _error(lambda: _two_steps(rt, rt.setup(WithUnusedLayer())))
        return out
    finally:
        group.close()


def losses_with_compression(mode: str, steps: int) -> list[float]:
    """Per-step mean training loss (over both ranks) of a small MLP on fixed per-rank data."""
    rt = pt.Runtime(strategy="ddp", seed=0, timeout=60, grad_compression=mode)
    generator = torch.Generator().manual_seed(100 + rt.rank)  # each rank its own data
    inputs = torch.randn(steps, 16, 32, generator=generator)
    targets = (inputs[..., :4].sum(-1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    model, optimizer = rt.setup(model, optimizer)
    losses = []
    for x, y in zip(inputs, targets):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        rt.backward(loss)
        rt.step(optimizer)
        losses.append(float(pt.all_reduce(loss.detach())))
    del model, optimizer
    rt.close()
    return losses


def digits_accuracy_with_compression(mode: str) -> float:
    """Dev accuracy of the digits task after 2 epochs on 2 ranks with ``mode``."""
    result = pt.fit("digits", grad_compression=mode, epochs=2, progress=False, log_every=1000)
    return result.best_metrics["accuracy"]


def rebuilt_buckets_with_compression(mode: str, bucket_cap_mb: float | None = None) -> list[int]:
    """Bytes of each DDP bucket after DDP's rebuild (three steps of a 6.3 MB MLP), on 2 ranks."""
    options = {"bucket_cap_mb": bucket_cap_mb} if bucket_cap_mb else {}
    rt = pt.Runtime(strategy="ddp", seed=0, timeout=60, grad_compression=mode, **options)
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, fused=True)
    model, optimizer = rt.setup(model, optimizer)
    for _ in range(3):
        rt.backward(model(torch.randn(4, 512)).square().mean())
        rt.step(optimizer)
    sizes = [int(size) for size in model._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(",")]
    del model, optimizer
    rt.close()
    return sizes


def compression_runs(calls: list[tuple[str, tuple]]) -> list:
    """Each ``(name, args)`` of ``calls`` in turn, ``name`` one of this module's ``*_with_compression`` workers
    (each makes and closes its own Runtime), under one process group that they all join: one start of the
    job's processes for all of them. Collective; rank 0's results, in order."""
    group = pt.Runtime(strategy="ddp", seed=SEED)  # owns the process group
    try:
        return [globals()[name](*args) for name, args in calls]
    finally:
        group.close()
