"""TF32 matmuls: on by default on CUDA, switchable, nothing changed on CPU."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from paratrain.runtime.device import allow_tf32


@pytest.fixture
def precision_restored():
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cudnn.allow_tf32 = before[1]


@pytest.mark.parametrize("tf32", [True, False])
def test_cpu_runtime_changes_nothing(precision_restored, tf32):
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    rt = pt.Runtime(strategy="single", tf32=tf32)
    assert rt.device.type == "cpu"
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before
    rt.close()


def test_cuda_device_gets_tf32_unless_switched_off(precision_restored):
    # Only torch's process-wide flags are set: no GPU is needed to see them.
    allow_tf32(torch.device("cuda", 0))
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cudnn.allow_tf32
    allow_tf32(torch.device("cuda", 0), enabled=False)
    assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cuda.matmul.allow_tf32
    assert not torch.backends.cudnn.allow_tf32


def test_tf32_takes_a_bool():
    with pytest.raises(pt.ConfigError, match="tf32 must be a bool"):
        pt.Runtime(tf32="no")
