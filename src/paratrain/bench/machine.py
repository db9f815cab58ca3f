"""The machine a benchmark ran on: CPU, GPUs, memory, and the versions of torch and every peer library."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata

PEER_PACKAGES = ("paratrain", "torch", "accelerate", "lightning", "transformers", "deepspeed", "horovod")


@dataclass(frozen=True)
class Machine:
    cpu_model: str
    cpu_cores: int
    memory_gib: float
    gpu_count: int
    gpu_model: str | None
    gpu_memory_gib: float | None
    cuda: str | None
    nccl: str | None
    bf16_supported: bool
    python: str
    platform: str
    versions: dict[str, str | None] = field(default_factory=dict)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def describe(self) -> str:
        """One line for titles: CPU (cores) [+ GPUs]."""
        text = f"{self.cpu_model} ({self.cpu_cores} cores)"
        if self.gpu_count:
            text += f", {self.gpu_count}× {self.gpu_model} ({self.gpu_memory_gib:.0f} GiB)"
        return text


def detect_machine() -> Machine:
    import psutil
    import torch

    cuda = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if cuda else None
    return Machine(
        cpu_model=_cpu_model(),
        cpu_cores=os.cpu_count() or 1,
        memory_gib=round(psutil.virtual_memory().total / 2**30, 1),
        gpu_count=torch.cuda.device_count() if cuda else 0,
        gpu_model=props.name if props else None,
        gpu_memory_gib=round(props.total_memory / 2**30, 1) if props else None,
        cuda=torch.version.cuda if cuda else None,
        nccl=".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        # Native bf16 only: emulated bf16 (V100, T4) is slower than fp16, the mixed precision to bench there.
        bf16_supported=torch.cuda.is_bf16_supported(including_emulation=False) if cuda else True,  # CPU autocast supports bf16
        python=sys.version.split()[0],
        platform=platform.platform(),
        versions={name: package_version(name) for name in PEER_PACKAGES},
        load_average=tuple(round(x, 2) for x in os.getloadavg()),
    )


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
