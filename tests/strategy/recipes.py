"""One small training recipe, run the same way by spawned workers and by the test process.

Every rank of a run with ``world`` ranks and ``accumulate`` micro-steps takes its
own ``batch`` rows of each global batch; a single process with
``batch * world * accumulate`` rows sees exactly the same samples per optimizer step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import paratrain as pt

SEED = 1234
FEATURES = 8
STEPS = 20
BATCH = 4  # rows per rank per micro-step
CLIP = 0.5  # small enough that some steps clip


class Block(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.tanh(self.linear(x))


class Net(torch.nn.Module):
    """Input layer, a ModuleList of blocks (fsdp's default wrap units), a head."""

    def __init__(self, width: int = 16, batchnorm: bool = False):
        super().__init__()
        self.inp = torch.nn.Linear(FEATURES, width)
        self.norm = torch.nn.BatchNorm1d(width) if batchnorm else torch.nn.Identity()
        self.blocks = torch.nn.ModuleList([Block(width) for _ in range(2)])
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x):
        x = torch.tanh(self.norm(self.inp(x)))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def target(x: torch.Tensor) -> torch.Tensor:
    """A smooth function a small MLP can learn in a few dozen steps."""
    weights = torch.linspace(-1.0, 1.0, FEATURES).unsqueeze(1)
    return x @ weights / 2 + 0.5 * torch.tanh(2 * x[:, :1])


def dataset(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed noisy regression problem (same on every process, whatever the global seed)."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(rows, FEATURES, generator=gen)
    return x, target(x) + 0.05 * torch.randn(rows, 1, generator=gen)


def train(
    rt: pt.Runtime,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    steps: int = STEPS,
    batch: int = BATCH,
    accumulate: int = 1,
    clip: float | None = CLIP,
) -> dict[str, list[float]]:
    """Train ``steps`` optimizer steps; return the global loss and grad norm per step."""
    world, rank = rt.world_size, rt.rank
    per_step = batch * world * accumulate
    x, y = dataset(per_step * steps)
    losses, norms = [], []
    for step in range(steps):
        step_loss = 0.0
        for micro in range(accumulate):
            start = step * per_step + (micro * world + rank) * batch
            xb, yb = x[start : start + batch].to(rt.device), y[start : start + batch].to(rt.device)
            with rt.accumulate(model, steps=accumulate):
                with rt.autocast():
                    loss = F.mse_loss(model(xb).float(), yb)
                rt.backward(loss)
                norm = rt.step(optimizer, clip_norm=clip).grad_norm
            step_loss += float(pt.all_reduce(loss.detach(), op="mean")) / accumulate
        losses.append(step_loss)
        norms.append(float(norm) if norm is not None else float("nan"))
    return {"losses": losses, "norms": norms}


@torch.no_grad()
def evaluate(rt: pt.Runtime, model: torch.nn.Module, rows: int = 256) -> float:
    """Loss on held-out rows (the same on every rank), under the runtime's autocast."""
    gen = torch.Generator().manual_seed(99)
    x = torch.randn(rows, FEATURES, generator=gen)
    y = target(x)
    was_training = model.training
    model.eval()
    with rt.autocast():
        loss = F.mse_loss(model(x.to(rt.device)).float(), y.to(rt.device))
    model.train(was_training)
    return float(loss)


def sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def flat_state(state: dict[str, torch.Tensor]) -> dict[str, list]:
    """A state dict as plain lists (safe to return from a spawned worker)."""
    return {k: v.detach().float().cpu().flatten().tolist() for k, v in state.items()}


def run_single(batch: int, **train_options) -> dict:
    """The single-process reference: one Runtime('single') in this process."""
    rt = pt.Runtime(strategy="single", seed=SEED)
    model = Net(batchnorm=train_options.pop("batchnorm", False))
    optimizer = sgd(model.parameters())
    model, optimizer = rt.setup(model, optimizer)
    result = train(rt, model, optimizer, batch=batch, **train_options)
    result["state"] = flat_state(rt.strategy.model_state_dict(model))
    rt.close()
    return result
