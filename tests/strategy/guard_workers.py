"""pt.spawn workers: steps on what rt.setup did not return, and weights that drift apart."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import paratrain as pt
from paratrain.tasks import TaskOptions
from tests.strategy.recipes import SEED, Net, dataset, sgd


def _error(call, *args, **kwargs) -> str | None:
    try:
        call(*args, **kwargs)
    except pt.ParatrainError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def unwrapped_steps() -> list[dict]:
    """Every rank's errors for: a model never set up, its optimizer, model.module, accumulate(original)."""
    rt = pt.Runtime(strategy="ddp", seed=SEED)
    x, y = dataset(4)
    out = {}
    plain = Net()
    plain_optimizer = sgd(plain.parameters())
    before = [p.detach().clone() for p in plain.parameters()]
    out["backward"] = _error(rt.backward, F.mse_loss(plain(x), y))
    out["step"] = _error(rt.step, plain_optimizer)
    out["unchanged"] = all(torch.equal(b, p) for b, p in zip(before, plain.parameters()))

    model = Net()
    model, optimizer = rt.setup(model, sgd(model.parameters()))
    out["inner_module"] = _error(rt.backward, F.mse_loss(model.module(x), y))  # bypasses DDP's all-reduce
    out["accumulate_original"] = _error(lambda: rt.accumulate(model.module, steps=2).__enter__())
    rt.backward(F.mse_loss(model(x), y))  # the set-up model: fine
    out["set_up_step"] = _error(rt.step, optimizer)
    late = sgd(model.parameters())  # built after setup from the set-up model: fine
    rt.backward(F.mse_loss(model(x), y))
    out["late_optimizer"] = _error(rt.step, late)
    results = pt.all_gather_object(out)
    rt.close()
    return results


class NudgeOnRank1(pt.Callback):
    """Changes one parameter (or buffer) on rank 1 only, after step ``at``."""

    def __init__(self, at: int, name: str):
        self.at, self.name = at, name

    def on_step_end(self, trainer, step, loss):
        if step == self.at and pt.rank() == 1:
            module = trainer.runtime.unwrap(trainer.model)
            tensor = dict([*module.named_parameters(), *module.named_buffers()])[self.name]
            with torch.no_grad():
                local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
                local.add_(1e-3)


def separable(rows: int, seed: int) -> torch.utils.data.TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 4, generator=gen)
    return torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())


class Scaled(torch.nn.Module):
    """A replicated buffer that no wrapper re-synchronises under fsdp."""

    def __init__(self, width: int):
        super().__init__()
        self.register_buffer("scale", torch.ones(width))

    def forward(self, x):
        return x * self.scale


def diverged(strategy: str, name: str, directory: str) -> None:
    """pt.fit with a nudge on rank 1 after step 3 and a check every 2 steps; each rank writes its error."""
    torch.manual_seed(0)
    # BatchNorm statistics differ per rank by design (each rank's own batch): never reported
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), Scaled(16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 2))
    error = _error(
        pt.fit, model, separable(256, 1), separable(32, 2), max_steps=8, batch_size=8, strategy=strategy,
        check_sync_every=2, progress=False, callbacks=[NudgeOnRank1(3, name)],
    )
    # fit closed its process group: the rank comes from the launcher's environment now
    with open(f"{directory}/rank{pt.rank()}.txt", "w") as file:
        file.write(str(error))


def guard_runs(nudged: list[tuple[str, str]], directory: str) -> list[dict]:
    """:func:`unwrapped_steps`, then :func:`diverged` for each ``(strategy, name)`` of ``nudged`` (writing
    to ``directory``/``strategy``), one after the other in one job: one start of its processes for all."""
    import os

    ranks = unwrapped_steps()
    for strategy, name in nudged:
        os.makedirs(f"{directory}/{strategy}", exist_ok=True)
        diverged(strategy, name, f"{directory}/{strategy}")
    return ranks
