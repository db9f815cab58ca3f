"""pt.spawn workers for the DeepSpeed strategy tests (ZeRO on gloo through DeepSpeed's CPU accelerator)."""

from __future__ import annotations

import gc

import torch

import paratrain as pt
from tests.strategy.recipes import CLIP, SEED, Net, evaluate, flat_state, sgd, train


def _zero_run(stage: int, precision: str = "32-true", **train_options) -> dict:
    rt = pt.Runtime(strategy="deepspeed", precision=precision, seed=SEED, zero_stage=stage, gradient_clipping=CLIP)
    model = Net()
    optimizer = sgd(model.parameters())
    model, optimizer = rt.setup(model, optimizer)
    before = evaluate(rt, model)
    result = train(rt, model, optimizer, **train_options)
    result["state"] = flat_state(rt.strategy.model_state_dict(model))
    result["loss_before"], result["loss_after"] = before, evaluate(rt, model)
    # what this rank holds: stage 3 keeps its slice in ds_tensor and an empty placeholder in .data
    result["local_numel"] = sum(getattr(p, "ds_tensor", p.data).numel() for p in rt.unwrap(model).parameters())
    try:
        rt.step(optimizer, clip_norm=2 * CLIP)
    except pt.ConfigError as exc:
        result["other_clip_norm"] = str(exc)
    return result


def _two_groups(stage: int) -> list[dict]:
    """A head with its own learning rate: the checkpoint keeps each group's parameter names."""
    rt = pt.Runtime(strategy="deepspeed", seed=SEED, zero_stage=stage)
    model = Net()
    head = [p for name, p in model.named_parameters() if name.startswith("head.")]
    body = [p for name, p in model.named_parameters() if not name.startswith("head.")]
    optimizer = torch.optim.SGD([{"params": body}, {"params": head, "lr": 0.01}], lr=0.05)
    model, optimizer = rt.setup(model, optimizer)
    train(rt, model, optimizer, steps=2, clip=None)
    access = rt.strategy.state_access()
    return [{"params": group["params"], "lr": group["lr"]}
            for group in access.optimizer_state(access.module, optimizer)["param_groups"]]


def _unclipped(strategy: str, **options) -> dict:
    """The recipe with no clipping asked for: DeepSpeed must not clip on its own (its default is 1.0)."""
    rt = pt.Runtime(strategy=strategy, seed=SEED, **options)
    model = Net()
    optimizer = sgd(model.parameters())
    model, optimizer = rt.setup(model, optimizer)
    return train(rt, model, optimizer, clip=None)


def zero_stages_train_alike() -> dict:
    """ZeRO 1, 2 and 3, with and without accumulation, unclipped beside ddp, and bf16-mixed: rank 0's results."""
    group = pt.Runtime(strategy="ddp", seed=SEED)  # owns the process group the engines share
    try:
        out = {f"zero{stage}": _zero_run(stage) for stage in (1, 2, 3)}
        for stage in (2, 3):
            out[f"zero{stage}_accum"] = _zero_run(stage, accumulate=4, steps=5)
        out["two_groups"] = {stage: _two_groups(stage) for stage in (2, 3)}
        out["unclipped"] = {"ddp": _unclipped("ddp"), **{f"zero{stage}": _unclipped("deepspeed", zero_stage=stage) for stage in (1, 2)}}
        out["zero2_bf16-mixed"] = _zero_run(2, precision="bf16-mixed", clip=None, steps=30)
        return out
    finally:
        gc.collect()
        group.close()
