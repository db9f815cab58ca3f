"""A set-up model called with a batch on another device fails in one line, on a CPU machine too:
a batch on ``meta`` stands for CPU labels beside a CUDA model (the README's script before
``rt.loader`` moved batches). One process; no kernel runs on ``meta``."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt


def net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def test_a_batch_on_another_device_than_the_model_is_refused_in_one_line():
    rt = pt.Runtime(strategy="single")
    model = rt.setup(net())
    with pytest.raises(pt.ConfigError) as refused:
        model(torch.ones(2, 4, device="meta"))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("the model runs on cpu and this forward's inputs are on meta")
    assert "rt.loader" in message


class WithLengths(torch.nn.Module):
    """A forward that takes a device tensor and one kept on the host on purpose (pack_padded_sequence's lengths)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x, lengths=None):
        return self.linear(x)


def test_inputs_on_the_device_and_ones_kept_elsewhere_beside_them_pass():
    rt = pt.Runtime(strategy="single")
    model = rt.setup(WithLengths())
    assert model(torch.ones(2, 4)).shape == (2, 2)
    assert model(torch.ones(2, 4), lengths=torch.ones(2, device="meta")).shape == (2, 2)
    with pytest.raises(pt.ConfigError, match="inputs are on meta"):
        model(x=torch.ones(2, 4, device="meta"))  # keyword inputs are checked too


def test_dataparallel_which_scatters_host_inputs_is_not_checked():
    rt = pt.Runtime(strategy="dp")
    assert rt.strategy.moves_inputs
