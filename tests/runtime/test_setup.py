"""Runtime.setup in one process: return values, refusals, SyncBN conversion, compile, unwrap."""

from __future__ import annotations

import pytest
import torch

import paratrain as pt
from paratrain.strategy.sync_batchnorm import CPUSyncBatchNorm, convert_sync_batchnorm


def test_setup_returns_the_model_alone_or_with_the_optimizers():
    rt = pt.Runtime(strategy="single")
    model = torch.nn.Linear(2, 2)
    assert rt.setup(model) is model
    other = torch.nn.Linear(2, 2)
    first, second = torch.optim.SGD(other.parameters(), lr=0.1), torch.optim.Adam(other.parameters())
    assert rt.setup(other, first, second) == (other, first, second)


def test_setup_twice_is_refused_for_the_model_and_its_wrapper():
    rt = pt.Runtime(strategy="dp")
    model = torch.nn.Linear(2, 2)
    wrapped = rt.setup(model)
    for again in (model, wrapped):
        with pytest.raises(pt.ConfigError, match="already called on this model"):
            pt.Runtime(strategy="dp").setup(again)


def test_setup_rejects_what_is_not_a_module():
    with pytest.raises(pt.ConfigError, match="torch.nn.Module"):
        pt.Runtime(strategy="single").setup(lambda x: x)


def test_sync_batchnorm_with_one_process_warns_and_keeps_batchnorm():
    rt = pt.Runtime(strategy="single", sync_batchnorm=True)
    with pytest.warns(UserWarning, match="no effect with one process"):
        model = rt.setup(torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3)))
    assert type(model[1]) is torch.nn.BatchNorm1d


def test_cpu_sync_batchnorm_conversion_keeps_tensors_and_keys():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 1), torch.nn.BatchNorm2d(3), torch.nn.Linear(2, 2))
    bn = model[1]
    keys = model.state_dict().keys()
    converted = convert_sync_batchnorm(model, torch.device("cpu"))
    assert type(converted[1]) is CPUSyncBatchNorm
    assert not isinstance(converted[1], torch.nn.SyncBatchNorm)  # DDP refuses those on CPU
    assert converted[1].weight is bn.weight and converted[1].running_var is bn.running_var
    assert converted.state_dict().keys() == keys
    # Without a process group it is plain BatchNorm.
    x = torch.randn(4, 3, 2, 2)
    reference = torch.nn.BatchNorm2d(3)
    torch.testing.assert_close(converted[1](x), reference(x))


def test_compile_wraps_and_unwrap_returns_the_users_module():
    rt = pt.Runtime(strategy="dp", compile=True)
    model = torch.nn.Linear(2, 2)
    compiled = rt.setup(model)
    assert compiled is not model and hasattr(compiled, "_orig_mod")
    assert rt.unwrap(compiled) is model


def test_check_same_weights_is_free_in_one_process():
    rt = pt.Runtime(strategy="single")
    rt.check_same_weights(rt.setup(torch.nn.Linear(2, 2)))
