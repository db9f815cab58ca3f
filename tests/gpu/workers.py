"""Worker functions of the GPU suite (spawned children import them); results are plain values."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import paratrain as pt
from tests.strategy.recipes import SEED, Net, flat_state, sgd, train


def trained(strategy: str, precision: str = "32-true", steps: int = 10, batch: int = 4, batchnorm: bool = False,
            **options) -> dict:
    """Train the recipe's Net on this rank's GPU (``batch`` rows per rank and step, TF32
    off); the global losses and rank 0's whole weights."""
    rt = pt.Runtime(strategy=strategy, precision=precision, seed=SEED, tf32=False, **options)
    model = Net(batchnorm=batchnorm)
    model, optimizer = rt.setup(model, sgd(model.parameters()))
    result = train(rt, model, optimizer, steps=steps, batch=batch, clip=None)
    result["state"] = flat_state(rt.full_state_dict(model))
    result["device"] = str(rt.device)
    result["backend"] = dist.get_backend() if dist.is_initialized() else None
    result["syncbn"] = any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules())
    del model, optimizer
    rt.close()
    return result


def deepspeed_zero2() -> dict:
    return trained("deepspeed", zero_stage=2)


def ddp_with_sync_batchnorm() -> dict:
    return trained("ddp", batchnorm=True, sync_batchnorm=True)


def gpu_per_task() -> tuple[str, str]:
    """As a ``CUDA_VISIBLE_DEVICES=$LOCAL_RANK`` wrapper would: each rank sees one GPU, its own."""
    os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["LOCAL_RANK"]  # before CUDA starts in this process
    rt = pt.Runtime(strategy="ddp", timeout=120)
    uuid = str(torch.cuda.get_device_properties(rt.device).uuid)
    uuids = pt.all_gather_object(uuid)
    rt.close()
    return str(rt.device), "distinct" if len(set(uuids)) == len(uuids) else f"shared: {uuids}"


def in_a_users_nccl_group() -> float:
    """``dist.init_process_group("nccl")`` first: the Runtime's CPU collectives must still work."""
    from paratrain import comm

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rt = pt.Runtime(strategy="ddp", timeout=120)
    flag = comm.any_rank(torch.tensor([rt.rank == 1]))  # a CPU tensor: gloo's job, never NCCL's
    total = pt.all_reduce(torch.tensor(float(rt.rank + 1), device=rt.device), op="sum")
    rt.close()
    dist.destroy_process_group()
    return float(flag.item()) + float(total.item())
