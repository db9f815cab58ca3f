"""Workers for the fast-default tests: each variant trains the recipe's MLP from the same seed.

Runs many variants in one job (a process start costs seconds) and returns rank 0's
results as plain Python values.
"""

from __future__ import annotations

import torch

import paratrain as pt
from paratrain.strategy.optimizer_kernels import kernel_options
from tests.strategy.recipes import CLIP, SEED, Net, flat_state, train
from tests.strategy.workers import _count_allreduces

STEPS = 8


def adamw(parameters, fused: bool) -> torch.optim.Optimizer:
    parameters = list(parameters)
    return torch.optim.AdamW(parameters, lr=0.01, weight_decay=0.01,
                             **kernel_options(torch.optim.AdamW, parameters, enabled=fused))


def train_variant(strategy: str, fused: bool = True, precision: str = "32-true", compile: bool = False,
                  accumulate: int = 1, checkpoint_dir: str | None = None, **options) -> dict:
    """One run of the recipe: losses, grad norms, the weights (user's key names), the kernel used.

    The run is two ``train()`` calls of ``STEPS // 2`` steps (the same batches each time);
    with ``checkpoint_dir`` the first saves a checkpoint there and a new runtime, model
    and optimizer resume from it for the second.
    """
    if strategy == "deepspeed":  # DeepSpeed clips inside its engine: it takes the norm at construction
        options["gradient_clipping"] = CLIP

    rounds = [[0]]  # ddp: gradient all-reduce rounds of each model built

    def build():
        rt = pt.Runtime(strategy=strategy, precision=precision, seed=SEED, compile=compile, **options)
        model = Net()
        model, optimizer = rt.setup(model, adamw(model.parameters(), fused))
        if strategy == "ddp":
            rounds.append(_count_allreduces(getattr(model, "_orig_mod", model)))
        return rt, model, optimizer

    rt, model, optimizer = build()
    result = train(rt, model, optimizer, steps=STEPS // 2, accumulate=accumulate)
    if checkpoint_dir is not None:
        pt.Checkpointer(rt, checkpoint_dir, model=model, optimizer=optimizer).save(step=STEPS // 2)
        rt.close()
        rt, model, optimizer = build()
        assert pt.Checkpointer(rt, checkpoint_dir, model=model, optimizer=optimizer).resume() is not None
    second = train(rt, model, optimizer, steps=STEPS // 2, accumulate=accumulate)
    result = {key: result[key] + second[key] for key in result}
    result["allreduce_rounds"] = sum(count[0] for count in rounds)
    result["state"] = flat_state(rt.strategy.model_state_dict(model))
    result["fused"] = optimizer.defaults.get("fused")
    result["foreach"] = optimizer.defaults.get("foreach")
    rt.close()
    return result


def fused_and_unfused(strategy: str) -> dict:
    """``{"fused": run, "unfused": run}``."""
    return {label: train_variant(strategy, fused=fused) for label, fused in (("fused", True), ("unfused", False))}


def compiled_and_eager(strategy: str, checkpoint_dir: str) -> dict:
    """``{"eager", "compiled", "resumed", "frames"}``: the same run eager, under ``compile=True``
    (2 accumulation micro-steps a step), and compiled with a checkpoint and resume half-way.
    ``frames`` counts the frames dynamo compiled (0 would mean compile did nothing)."""
    torch._dynamo.utils.counters.clear()
    out = {label: train_variant(strategy, compile=compiled, accumulate=2)
           for label, compiled in (("eager", False), ("compiled", True))}
    out["frames"] = torch._dynamo.utils.counters["frames"]["ok"]
    out["resumed"] = train_variant(strategy, compile=True, accumulate=2, checkpoint_dir=f"{checkpoint_dir}/{strategy}")
    return out


def fast_defaults_on_two_ranks(strategies: list[str], checkpoint_dir: str) -> dict:
    """``{strategy: {"kernels": fused_and_unfused, "compile": compiled_and_eager}}`` in one
    2-process job; the first Runtime owns the process group the variants share."""
    group = pt.Runtime(strategy="ddp", seed=SEED)
    try:
        out = {s: {"kernels": fused_and_unfused(s), "compile": compiled_and_eager(s, checkpoint_dir)} for s in strategies}
        out["bucket_view"] = {
            given: pt.Runtime(strategy="ddp", **options).setup(Net()).gradient_as_bucket_view
            for given, options in (("default", {}), ("False", {"gradient_as_bucket_view": False}))
        }
        return out
    finally:
        group.close()
