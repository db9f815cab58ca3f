"""Precision registry, autocast, refusals and scaler state in one process."""

from __future__ import annotations

import io

import pytest
import torch

import paratrain as pt
from paratrain.precision import PRECISIONS, create_precision
from paratrain.precision.api import check_autocast

CPU = torch.device("cpu")


def test_unknown_precision_lists_the_valid_names():
    with pytest.raises(pt.ConfigError) as info:
        pt.Runtime(strategy="single", precision="fp8")
    message = str(info.value)
    assert "'fp8'" in message
    for name in ("32-true", "bf16-mixed", "fp16-mixed"):
        assert name in message


@pytest.mark.parametrize("name, dtype", [("32-true", torch.float32), ("bf16-mixed", torch.bfloat16), ("fp16-mixed", torch.float16)])
def test_autocast_runs_matmuls_in_the_precision_dtype(name, dtype):
    precision = create_precision(name, CPU)
    layer = torch.nn.Linear(4, 4)
    with precision.autocast():
        assert layer(torch.randn(2, 4)).dtype == dtype
    assert layer.weight.dtype == torch.float32  # weights stay fp32


def test_fsdp_policy_gathers_in_the_compute_dtype_and_reduces_in_fp32():
    assert create_precision("32-true", CPU).fsdp_policy().param_dtype is None
    policy = create_precision("bf16-mixed", CPU).fsdp_policy()
    assert policy.param_dtype == torch.bfloat16 and policy.reduce_dtype == torch.float32


def test_a_dtype_the_device_cannot_autocast_to_is_refused_with_advice():
    # CPU autocast has no float64 mode: torch disables autocast and the probe computes in fp32.
    with pytest.warns(UserWarning), pytest.raises(pt.ConfigError) as info:
        check_autocast(CPU, torch.float64, "f64-mixed")
    assert "not supported on cpu" in str(info.value) and "precision='32-true'" in str(info.value)


def test_fp16_scaler_state_round_trips_through_torch_save():
    precision = create_precision("fp16-mixed", CPU)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    precision.backward(model(torch.randn(3, 4)).sum() * 1e35)  # overflows once scaled
    precision.unscale(optimizer)
    assert precision.optimizer_step(optimizer) is False
    buffer = io.BytesIO()
    torch.save(precision.state_dict(), buffer)
    restored = create_precision("fp16-mixed", CPU)
    restored.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    assert restored.state_dict() == precision.state_dict()
    assert restored.scale == 32768.0 and restored.skipped_steps == 1


def test_registry_names_match_classes():
    assert sorted(PRECISIONS) == ["32-true", "bf16-mixed", "fp16-mixed"]
    assert all(cls.name == name for name, cls in PRECISIONS.items())
