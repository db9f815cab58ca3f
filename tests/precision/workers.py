"""Top-level worker functions for the precision tests (spawned children import them)."""

from __future__ import annotations

import copy
import io

import torch
import torch.nn.functional as F

import paratrain as pt
from tests.strategy.recipes import SEED, Net, dataset, evaluate, flat_state, sgd, train


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _fp16_forced_overflow(rt, model, optimizer) -> dict:
    """A loss so large that the scaled gradients overflow: the step must be skipped and counted."""
    x, y = dataset(8)
    before = _params(model)
    scale = rt.precision.scale
    with rt.autocast():
        loss = F.mse_loss(model(x).float(), y)
    rt.backward(loss * 1e35)  # times the 65536 scale: beyond float32's 3.4e38
    result = rt.step(optimizer)
    return {
        "result": (bool(result), result.stepped, result.updated),
        "params_unchanged": all(torch.equal(a, b) for a, b in zip(before, _params(model))),
        "skipped_steps": rt.precision.skipped_steps,
        "scale_before": scale,
        "scale_after": rt.precision.scale,
    }


def _fp16_clip_sees_unscaled(rt, model) -> dict:
    """step(clip_norm=) must clip the true gradients, not the scaled ones."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)  # update == -clipped gradient
    x, y = dataset(8)
    with rt.autocast():
        loss = F.mse_loss(model(x).float(), y)
    rt.backward(loss)
    scale = rt.precision.scale
    true_norm = torch.linalg.vector_norm(torch.stack([p.grad.float().norm() for p in model.parameters()])) / scale
    before = _params(model)
    clip = float(true_norm) / 4
    reported = rt.step(optimizer, clip_norm=clip).grad_norm
    update = torch.linalg.vector_norm(torch.stack([(b - a).norm() for a, b in zip(_params(model), before)]))
    return {"scale": scale, "true_norm": float(true_norm), "reported_norm": float(reported),
            "clip": clip, "update_norm": float(update)}


def _learns(rt, model) -> dict:
    """Held-out loss before and after 30 steps."""
    before = evaluate(rt, model)
    result = train(rt, model, sgd(model.parameters()), steps=30)
    return {"before": before, "after": evaluate(rt, model), "losses": result["losses"]}


def _snapshot(rt, model, optimizer) -> dict:
    buffer = io.BytesIO()
    torch.save(rt.precision.state_dict(), buffer)
    return {
        "model": copy.deepcopy(rt.unwrap(model).state_dict()),
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "precision": buffer.getvalue(),
    }


def mixed_precision_on_two_ranks():
    """fp16-mixed (skip, clip, save/load) and bf16-mixed on ddp, and both on fsdp; rank 0's results."""
    group = pt.Runtime(strategy="ddp", seed=SEED)
    try:
        out: dict = {}
        rt = pt.Runtime(strategy="ddp", precision="fp16-mixed", seed=SEED)
        model = rt.setup(Net())
        optimizer = sgd(model.parameters())
        out["overflow"] = _fp16_forced_overflow(rt, model, optimizer)
        out["clip"] = _fp16_clip_sees_unscaled(rt, model)
        train(rt, model, optimizer, steps=3)

        saved = _snapshot(rt, model, optimizer)
        train(rt, model, optimizer, steps=3)
        out["uninterrupted"] = flat_state(rt.unwrap(model).state_dict())
        out["uninterrupted_precision"] = rt.precision.state_dict()

        resumed = pt.Runtime(strategy="ddp", precision="fp16-mixed", seed=SEED + 1)
        out["fresh_precision"] = resumed.precision.state_dict()
        model = resumed.setup(Net())
        optimizer = sgd(model.parameters())
        resumed.unwrap(model).load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        resumed.precision.load_state_dict(torch.load(io.BytesIO(saved["precision"]), weights_only=True))
        out["loaded_precision"] = resumed.precision.state_dict()
        train(resumed, model, optimizer, steps=3)
        out["resumed"] = flat_state(resumed.unwrap(model).state_dict())
        out["resumed_precision"] = resumed.precision.state_dict()

        rt = pt.Runtime(strategy="ddp", precision="bf16-mixed", seed=SEED)
        model = rt.setup(Net())
        with rt.autocast():
            out["bf16_output_dtype"] = str(model(torch.randn(2, 8)).dtype)
        out["ddp_bf16-mixed"] = _learns(rt, model)

        for precision in ("bf16-mixed", "fp16-mixed"):
            rt = pt.Runtime(strategy="fsdp", precision=precision, seed=SEED)
            model = rt.setup(Net())
            out[f"fsdp_{precision}"] = _learns(rt, model)
            out[f"fsdp_{precision}"]["skipped_steps"] = getattr(rt.precision, "skipped_steps", 0)
        return out
    finally:
        group.close()
