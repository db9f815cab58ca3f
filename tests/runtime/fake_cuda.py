"""A CUDA machine as far as torch's device queries go, for checking what paratrain asks
for and in which order on a CPU-only torch. No kernel runs: objects are built on a
``torch.device("cuda", i)`` value, and the calls that would reach a driver are recorded.
"""

from __future__ import annotations

import pytest
import torch


class FakeCuda:
    """Records ``(name, args...)`` of the CUDA calls made while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, visible: int = 2, native_bf16: bool = True):
        self.calls: list[tuple] = []
        self.current = 0
        self.native_bf16 = native_bf16
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
        monkeypatch.setattr(torch.cuda, "set_device", self._set_device)
        monkeypatch.setattr(torch.cuda, "current_device", self._current_device)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", self._is_bf16_supported)

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]

    def _set_device(self, device) -> None:
        self.current = torch.device(device).index
        self.calls.append(("set_device", self.current))

    def _current_device(self) -> int:
        self.calls.append(("current_device", self.current))
        return self.current

    def _is_bf16_supported(self, including_emulation: bool = True) -> bool:
        # torch reads the current device; a T4/V100 answers True only counting emulation.
        self.calls.append(("is_bf16_supported", self.current, including_emulation))
        return self.native_bf16 or including_emulation


@pytest.fixture
def tf32_restored():
    """Put torch's process-wide TF32 switches back as they were (through the switches
    that keep both of torch's getter families consistent)."""
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cudnn.allow_tf32 = before[1]
