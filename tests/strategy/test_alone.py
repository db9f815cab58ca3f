"""A strategy built alone: process, device and precision handed in, no Runtime in sight.

What it must do is what plain PyTorch does with the same model: the same losses and
weights, step by step (one process: DDP's all-reduce over one rank changes nothing).
"""

from __future__ import annotations

import gc

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from paratrain.env import ProcessInfo
from paratrain.precision import create_precision
from paratrain.runtime.process_group import destroy_process_group
from paratrain.strategy import create_strategy
from tests.strategy.recipes import Net, dataset

CPU = torch.device("cpu")
ONE = ProcessInfo(rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0, num_nodes=1,
                  master_addr=None, master_port=None, source="single")
STEPS = 4


def _plain() -> tuple[list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = dataset(16)
    losses = []
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, model.state_dict()


def _with(strategy) -> tuple[torch.nn.Module, list[float], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    module = Net()
    model, optimizer = strategy.setup(module, torch.optim.SGD(module.parameters(), lr=0.1))
    x, y = dataset(16)
    losses = []
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(x), y)
        strategy.backward(loss, model)
        strategy.step(optimizer, model=model)
        losses.append(loss.item())
    return model, losses, strategy.unwrap(model).state_dict()


def test_single_built_alone_trains_like_plain_pytorch():
    precision = create_precision("32-true", CPU)
    strategy = create_strategy("single", ONE, CPU, precision)
    assert (strategy.process, strategy.device, strategy.precision) == (ONE, CPU, precision)
    want_losses, want_weights = _plain()
    model, losses, weights = _with(strategy)
    assert type(model) is Net
    assert losses == want_losses
    assert all(torch.equal(weights[k], want_weights[k]) for k in want_weights)


def test_ddp_built_alone_wraps_and_trains_in_a_one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        strategy = create_strategy("ddp", ONE, CPU, create_precision("32-true", CPU))
        want_losses, want_weights = _plain()
        model, losses, weights = _with(strategy)
        assert isinstance(model, DistributedDataParallel)
        assert losses == want_losses
        assert all(torch.equal(weights[k], want_weights[k]) for k in want_weights)
        assert "module." not in next(iter(weights))
    finally:
        model = strategy = None  # a DDP reducer freed after its group is gone can hang (pytorch#56297)
        gc.collect()
        destroy_process_group()
