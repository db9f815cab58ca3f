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


def resolve_device(backend: str, local_rank: int) -> torch.device:
    """``cuda:LOCAL_RANK`` for NCCL (or gloo on a CUDA machine), else CPU.

    Raises:
        ConfigError: more local processes than visible GPUs.
    """
    if backend == "nccl" or (os.environ.get("PARATRAIN_DEVICE") != "cpu" and torch.cuda.is_available()):
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise ConfigError(
                f"local rank {local_rank} has no GPU ({count} visible); lower --nproc-per-node to {count} or set CUDA_VISIBLE_DEVICES"
            )
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def allow_tf32(device: torch.device, enabled: bool = True) -> None:
    """On a CUDA ``device``, let float32 matmuls and convolutions use TF32 tensor cores
    (``enabled``) or keep them in full float32; on other devices change nothing.

    TF32 keeps float32's range with a 10-bit mantissa: on Ampere and newer GPUs matmuls
    run several times faster, and training converges as in float32 (the reason torch
    enables it by default for cuDNN convolutions). The setting is process-wide, as torch's is.
    """
    if device.type != "cuda":
        return
    torch.set_float32_matmul_precision("high" if enabled else "highest")
    torch.backends.cudnn.allow_tf32 = enabled
