"""Which device and which backend this process uses."""

from __future__ import annotations

import os

import torch

from paratrain.arguments import option
from paratrain.errors import ConfigError

BACKENDS = ("auto", "gloo", "nccl")


def resolve_backend(requested: str | None = None) -> str:
    """``auto`` → ``nccl`` when CUDA is usable, else ``gloo``.

    ``requested`` defaults to ``PARATRAIN_BACKEND`` (set by ``paratrain run --backend``).

    Raises:
        ConfigError: unknown backend, or ``nccl`` without CUDA.
    """
    # Runtime() passes "auto" by default, which must still follow `paratrain run --backend`.
    if not requested or requested.lower() == "auto":
        requested = os.environ.get("PARATRAIN_BACKEND") or "auto"
    requested = requested.lower()
    if requested not in BACKENDS:
        raise ConfigError(f"backend {requested!r} is not one of {', '.join(BACKENDS)}")
    if requested == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if requested == "nccl" and not torch.cuda.is_available():
        raise ConfigError(f"backend nccl needs CUDA, and no CUDA device is visible; use {option('backend', 'gloo')} (or auto)")
    return requested


def resolve_device(backend: str, local_rank: int | None) -> torch.device:
    """The GPU this process uses for NCCL (or gloo on a CUDA machine), else CPU.

    ``local_rank=None`` (the launcher, before any worker exists): the workers' device
    type only, ``cuda`` without an index.

    The GPU is :func:`gpu_index` of the local rank among the visible devices, so a
    launcher that gives each task its own GPU (``srun --gpus-per-task=1``,
    ``--gpu-bind=per_task``, ``CUDA_VISIBLE_DEVICES=$LOCAL_RANK``) works as well as one
    process per visible GPU. ``torch.cuda.device_count()`` is NVML-based where NVML is
    found: it creates no CUDA context.

    Raises:
        ConfigError: more local processes than visible GPUs.
    """
    if backend == "nccl" or (os.environ.get("PARATRAIN_DEVICE") != "cpu" and torch.cuda.is_available()):
        if local_rank is None:
            return torch.device("cuda")
        return torch.device("cuda", gpu_index(local_rank, torch.cuda.device_count()))
    return torch.device("cpu")


def gpu_index(local_rank: int, visible: int) -> int:
    """Which of the ``visible`` GPUs local rank ``local_rank`` uses.

    One process per visible GPU: GPU ``local_rank``. One visible GPU for any local
    rank: GPU 0 — the launcher gave this task a GPU of its own (every task sees its GPU
    as device 0). Should two processes share that one GPU after all, NCCL refuses at
    ``init_process_group`` ("Duplicate GPU detected").

    Raises:
        ConfigError: no visible GPU, or more local processes than the several visible GPUs.
    """
    if visible == 1 or local_rank < visible:
        return 0 if visible == 1 else local_rank
    raise ConfigError(
        f"local rank {local_rank} has no GPU ({visible} visible); lower --nproc-per-node to {visible}, "
        "give each task its own GPU (srun --gpus-per-task=1), or set CUDA_VISIBLE_DEVICES"
    )


def use_device(device: torch.device) -> None:
    """Make ``device`` this process's current CUDA device (nothing on CPU).

    It comes before anything that asks torch about "the current device" (the bf16
    check, NCCL, ``torch.cuda.current_device()`` in collectives): without it each of
    them opens a CUDA context on GPU 0, from every rank.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)
