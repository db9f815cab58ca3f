"""What each rank of a method measured, written by the rank and read by the bench.

A rank writes ``rank<R>.json`` once, at the end (atomically: a crash leaves no
half file), and rank 0 keeps ``progress.json`` current so the bench can show a
progress line; nothing here needs a process group, so every launcher works.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

PROGRESS_FILE = "progress.json"
FINAL_WEIGHTS = "final.safetensors"


def rank_file(work_dir: Path, rank: int) -> Path:
    return Path(work_dir) / f"rank{rank}.json"


@dataclass
class RankRecord:
    """One rank's figures: its own loss per optimizer step and when each step ended (``time.time()``)."""

    rank: int
    world_size: int
    started: float
    step_losses: list[float] = field(default_factory=list)
    step_ends: list[float] = field(default_factory=list)
    samples_per_step: int = 0
    peak_rss_bytes: int = 0
    peak_gpu_bytes: int = 0
    device: str = "cpu"

    @classmethod
    def read(cls, path: Path) -> RankRecord:
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))


class StepRecorder:
    """Called by a method's training loop: :meth:`step` after every optimizer step, :meth:`finish` once.

    Reading a loss forces the device to finish the step (``.item()``), so step end
    times are real on GPUs too.
    """

    def __init__(self, work_dir: str | Path, rank: int, world_size: int, samples_per_step: int, device: torch.device | str,
                 memory_devices: Sequence[torch.device | str] | None = None):
        self.work_dir = Path(work_dir)
        #: whose peak memory is this rank's: its device, or all that DataParallel replicates onto.
        self.memory_devices = [torch.device(d) for d in (memory_devices or [device])]
        self.total_steps: int | None = None
        self.record = RankRecord(rank=rank, world_size=world_size, started=time.time(),
                                 samples_per_step=samples_per_step, device=str(device))

    def step(self, loss: torch.Tensor | float) -> None:
        value = float(loss.detach().float().item() if isinstance(loss, torch.Tensor) else loss)
        self.record.step_losses.append(value)
        self.record.step_ends.append(time.time())
        if self.record.rank == 0:
            _write_json(self.work_dir / PROGRESS_FILE, {"step": len(self.record.step_losses),
                                                       "first": self.record.step_ends[0], "time": self.record.step_ends[-1]})

    def finish(self, final_state: dict[str, torch.Tensor] | None = None) -> None:
        """Write this rank's record; rank 0 also writes the final weights (full, unwrapped state dict)."""
        if self.record.rank == 0 and final_state is not None:
            save_weights(final_state, self.work_dir / FINAL_WEIGHTS)
        self.record.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        self.record.peak_gpu_bytes = peak_gpu_bytes(self.memory_devices)
        _write_json(rank_file(self.work_dir, self.record.rank), asdict(self.record))


def peak_gpu_bytes(devices: Sequence[torch.device]) -> int:
    """The peak memory torch allocated on the CUDA ``devices``, added up (0 without CUDA)."""
    cuda = [device for device in devices if device.type == "cuda"]
    if not cuda or not torch.cuda.is_available():
        return 0
    return sum(int(torch.cuda.max_memory_allocated(device)) for device in cuda)


def save_weights(state: dict[str, torch.Tensor], path: Path) -> None:
    """A state dict as one safetensors file, without wrapper prefixes (``module.``, ``_orig_mod.``)."""
    from safetensors.torch import save_file
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    state = {key: value.detach().cpu().contiguous().clone() for key, value in state.items()}
    for prefix in ("_orig_mod.", "module."):
        consume_prefix_in_state_dict_if_present(state, prefix)
    tmp = path.with_name(path.name + ".tmp")
    save_file(state, str(tmp))
    os.replace(tmp, path)


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)
