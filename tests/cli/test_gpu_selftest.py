"""doctor's GPU self-test: silent without CUDA; each check one finding, a failure named
(the checks themselves run in the GPU suite, tests/gpu/test_doctor.py)."""

from __future__ import annotations

import torch

from paratrain.cli import gpu_selftest
from paratrain.cli.doctor_checks import OK, PROBLEM, WARNING, Finding


def test_without_cuda_there_is_no_self_test(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_selftest.gpu_self_test() == []


def test_every_check_reports_and_a_failing_one_is_a_problem_with_its_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # one GPU: no DDP check
    for name in ("_device", "_tf32_switch", "_fp16_scaler", "_clock_sync", "_compile"):
        monkeypatch.setattr(gpu_selftest, name, lambda device: "works")
    monkeypatch.setattr(gpu_selftest, "_bf16", lambda device: Finding("self-test: bf16", WARNING, "emulated"))

    def broken(device):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore lines")

    monkeypatch.setattr(gpu_selftest, "_compile", broken)
    found = {f.check: f for f in gpu_selftest.gpu_self_test()}
    assert list(found) == ["self-test: device", "self-test: tf32 switch", "self-test: bf16",
                           "self-test: fp16 GradScaler", "self-test: clock sync", "self-test: torch.compile"]
    assert found["self-test: device"].status == OK and found["self-test: bf16"].status == WARNING
    failed = found["self-test: torch.compile"]
    assert failed.status == PROBLEM and failed.detail == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_the_grad_scaler_check_itself_passes_where_its_logic_runs_on_the_cpu():
    """The fp16 check is device-independent arithmetic (torch's GradScaler runs on the CPU too): an
    overflowing step is skipped and halves the scale, and the next finite one is applied. On the first
    GPU it ran on, the finite step was skipped, because the skipped step's inf gradients were never
    cleared before it."""
    assert gpu_selftest._fp16_scaler(torch.device("cpu")).startswith("an overflowing step is skipped (scale 65536 -> 32768)")
