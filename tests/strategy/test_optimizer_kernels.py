"""Fused optimizer kernels: which one paratrain picks, that it trains the same weights, the hint."""

from __future__ import annotations

import logging

import pytest
import torch

import paratrain as pt
from paratrain.strategy import optimizer_kernels
from paratrain.strategy.optimizer_kernels import HINT_VARIABLE, kernel_options
from paratrain.tasks.registry import create_task
from tests.strategy.fast_default_workers import train_variant

# Fused and per-parameter AdamW differ only in rounding order: a few float32 ulps after 8 steps.
ATOL = 1e-6


def _parameters(dtype=torch.float32):
    return [torch.nn.Parameter(torch.zeros(3, dtype=dtype))]


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD, torch.optim.Adagrad])
def test_fused_where_torch_has_the_kernel(cls):
    assert kernel_options(cls, _parameters()) == {"fused": True}
    assert kernel_options(cls, _parameters(torch.bfloat16)) == {"fused": True}
    cls(_parameters(), lr=0.1, **kernel_options(cls, _parameters()))  # torch accepts the choice


def test_foreach_elsewhere_and_torch_default_when_off():
    assert kernel_options(torch.optim.RMSprop, _parameters()) == {"foreach": True}
    assert kernel_options(torch.optim.LBFGS, _parameters()) == {}
    assert kernel_options(torch.optim.AdamW, _parameters(), enabled=False) == {"fused": False}
    assert kernel_options(torch.optim.RMSprop, _parameters(), enabled=False) == {}


def test_tasks_build_fused_optimizers_and_can_switch_off():
    for name in ("digits", "mnist"):  # AdamW (the default) and SGD
        task = create_task(name)
        model = task.build_model()
        assert task.build_optimizer(model, 1e-3, 0.0).defaults["fused"] is True
        assert task.build_optimizer(model, 1e-3, 0.0, fused=False).defaults["fused"] is False


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "fp16-mixed"])
def test_fused_trains_the_same_weights_as_the_loop(precision):
    fused = train_variant("single", fused=True, precision=precision)
    loop = train_variant("single", fused=False, precision=precision)
    assert (fused["fused"], loop["fused"]) == (True, False)
    assert fused["losses"][-1] < 0.5 * fused["losses"][0]  # it trains
    for name, values in loop["state"].items():
        torch.testing.assert_close(torch.tensor(fused["state"][name]), torch.tensor(values), rtol=0, atol=ATOL)


@pytest.fixture
def hints(monkeypatch, caplog):
    """The hint lines logged (the once-per-process flag reset for each test)."""
    monkeypatch.setattr(optimizer_kernels, "_hinted", False)
    monkeypatch.delenv(HINT_VARIABLE, raising=False)
    caplog.set_level(logging.INFO, logger="paratrain")
    return lambda: [m for m in caplog.messages if "fused kernel" in m]


def _setup(*optimizer_builders):
    rt = pt.Runtime(strategy="single")
    model = torch.nn.Linear(4, 2)
    rt.setup(model, *(build(model.parameters()) for build in optimizer_builders))
    rt.close()


def test_hint_names_the_argument_once_per_process(hints):
    _setup(lambda p: torch.optim.AdamW(p, lr=0.1))
    _setup(lambda p: torch.optim.SGD(p, lr=0.1))
    assert len(hints()) == 1
    assert "torch.optim.AdamW(..., fused=True)" in hints()[0] and HINT_VARIABLE in hints()[0]


@pytest.mark.parametrize("choice", [{"fused": True}, {"fused": False}, {"foreach": True}, {"foreach": False}])
def test_no_hint_when_the_kernel_was_chosen(hints, choice):
    _setup(lambda p: torch.optim.AdamW(p, lr=0.1, **choice))
    _setup(lambda p: torch.optim.RMSprop(p, lr=0.1))  # no fused kernel in torch: nothing to suggest
    assert hints() == []


def test_hint_silenced_by_the_environment(hints, monkeypatch):
    monkeypatch.setenv(HINT_VARIABLE, "0")
    _setup(lambda p: torch.optim.Adam(p, lr=0.1))
    assert hints() == []
