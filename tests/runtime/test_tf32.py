"""TF32 matmuls: one owner (Runtime's tf32=), on by default on CUDA, switchable, nothing changed on CPU."""

from __future__ import annotations

import warnings

import pytest
import torch

import paratrain as pt
from paratrain.precision import PRECISIONS, create_precision
from paratrain.runtime.tf32 import DEPRECATION_NOTICE, set_tf32
from tests.runtime.fake_cuda import FakeCuda, tf32_restored  # noqa: F401 - the fixture

CUDA = torch.device("cuda", 0)


def tf32_as_torch_reports_it() -> dict[str, object]:
    """Every getter torch has for TF32 (the older ones raise when the two APIs were mixed)."""
    seen = {
        "matmul precision": torch.get_float32_matmul_precision(),
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
    }
    if hasattr(torch.backends.cudnn, "conv"):  # torch >= 2.9's per-backend strings
        seen["cuda.matmul.fp32_precision"] = torch.backends.cuda.matmul.fp32_precision
        seen["cudnn.conv.fp32_precision"] = torch.backends.cudnn.conv.fp32_precision
    return seen


@pytest.mark.parametrize("tf32", [True, False])
def test_cpu_runtime_changes_nothing(tf32_restored, tf32):
    before = tf32_as_torch_reports_it()
    rt = pt.Runtime(strategy="single", tf32=tf32)
    assert rt.device.type == "cpu"
    assert tf32_as_torch_reports_it() == before
    rt.close()


def test_cuda_device_gets_tf32_unless_switched_off(tf32_restored):
    # Only torch's process-wide flags are set: no GPU is needed to see them.
    set_tf32(CUDA)
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cudnn.allow_tf32
    set_tf32(CUDA, enabled=False)
    assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cuda.matmul.allow_tf32
    assert not torch.backends.cudnn.allow_tf32


@pytest.mark.filterwarnings("ignore:CUDA is not available")  # the autocast probe on a CPU torch
@pytest.mark.parametrize("name", sorted(PRECISIONS))
def test_no_precision_touches_tf32(tf32_restored, name):
    # TF32 had a second owner here that switched it on whatever Runtime(tf32=False) said.
    set_tf32(CUDA, enabled=False)
    before = tf32_as_torch_reports_it()
    try:
        create_precision(name, CUDA)
    except pt.ConfigError:
        pass  # bf16/fp16 probe a kernel, which a CPU torch cannot run: the constructor ran before it
    assert tf32_as_torch_reports_it() == before


@pytest.mark.parametrize("tf32", [True, False])
@pytest.mark.parametrize("precision", ["32-true", "fp16-mixed"])
def test_a_cuda_runtime_keeps_what_tf32_says_and_every_getter_answers(monkeypatch, tf32_restored, tf32, precision):
    fake = FakeCuda(monkeypatch)
    monkeypatch.setattr("paratrain.precision.fp16.check_autocast", lambda *args: None)  # no CUDA kernel here
    monkeypatch.setattr(torch.amp, "GradScaler", lambda *args, **kwargs: None)
    rt = pt.Runtime(strategy="single", precision=precision, tf32=tf32)
    assert rt.device == CUDA and fake.names()[0] == "set_device"
    seen = tf32_as_torch_reports_it()  # raised "mix of the legacy and new APIs" with two owners
    assert seen["cuda.matmul.allow_tf32"] is tf32 and seen["cudnn.allow_tf32"] is tf32
    assert seen["matmul precision"] == ("high" if tf32 else "highest")
    if "cudnn.conv.fp32_precision" in seen:
        assert (seen["cuda.matmul.fp32_precision"] == "tf32") is tf32
        assert (seen["cudnn.conv.fp32_precision"] == "tf32") is tf32
    rt.close()


def test_tf32_takes_a_bool():
    with pytest.raises(pt.ConfigError, match="tf32 must be a bool"):
        pt.Runtime(tf32="no")


def test_torch_2_9s_deprecation_notice_for_the_switches_is_not_passed_on(tf32_restored, monkeypatch):
    # torch 2.9 warns on the first use of the older switches; paratrain uses them on purpose.
    real = torch.set_float32_matmul_precision

    def like_torch_2_9(precision):
        warnings.warn(f"{DEPRECATION_NOTICE}, such as torch.backends.cudnn.conv.fp32_precision = 'tf32' ...", UserWarning)
        real(precision)

    monkeypatch.setattr(torch, "set_float32_matmul_precision", like_torch_2_9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        set_tf32(CUDA, enabled=False)
    assert torch.get_float32_matmul_precision() == "highest"
