"""pt.spawn workers for DeepSpeed ZeRO checkpoints (the recipe of ``workers.py`` on the engine)."""

from __future__ import annotations

import gc
import os

import paratrain as pt
from paratrain.checkpoint import Checkpointer
from tests.checkpoint.workers import EPOCHS, SEED, build, equal, full_params, run, train_step


def _in_zero(stage: int, body, *args) -> dict:
    rt = pt.Runtime(strategy="deepspeed", seed=SEED, zero_stage=stage)
    try:
        return body(rt, *args)
    finally:
        gc.collect()  # the engines go before the process group (see workers.in_runtime)
        rt.close()


def _whole_optimizer(rt, model, optimizer) -> dict:
    """Name-keyed whole optimizer state, gathered from the ZeRO partitions. Collective."""
    access = rt.strategy.state_access()
    return access.optimizer_state(access.module, optimizer)["state"]


def resume_and_save(stage: int, resume_dir: str, final_dir: str) -> dict:
    """Uninterrupted vs stopped-at-step-7-and-resumed at ZeRO ``stage`` on this world size,
    then one more checkpoint of the finished run in ``final_dir``."""
    return _in_zero(stage, _resume_and_save, resume_dir, final_dir)


def _resume_and_save(rt, resume_dir: str, final_dir: str) -> dict:
    whole = run(rt, None)
    stopped = run(rt, resume_dir, stop_after=7)
    resumed = run(rt, resume_dir, resume=True, init_seed=3)
    model, optimizer, schedule, loader = resumed["objects"]
    path = Checkpointer(rt, final_dir, model=model, optimizer=optimizer, scheduler=schedule, loader=loader).save(
        step=resumed["steps"], epoch=EPOCHS - 1
    )
    return {
        "bit_identical": equal(whole["params"], resumed["params"]),
        "differs_at_stop": not equal(whole["params"], stopped["params"]),
        "steps": resumed["steps"],
        "params": resumed["params"],
        "optimizer": _whole_optimizer(rt, model, optimizer),
        "files": sorted(os.listdir(path)),
    }


def resume_and_save_stages(stages: list[int], root: str) -> dict:
    """:func:`resume_and_save` at each ZeRO stage in turn, in ``root``/resume<stage> and
    ``root``/final<stage>: one job start (torch's and DeepSpeed's import) for all of them."""
    group = pt.Runtime(strategy="ddp", seed=SEED)  # owns the process group the engines share
    try:
        return {stage: resume_and_save(stage, f"{root}/resume{stage}", f"{root}/final{stage}") for stage in stages}
    finally:
        gc.collect()
        group.close()


def load(stage: int, directory: str) -> dict:
    """Load ``directory``'s newest checkpoint at ZeRO ``stage`` on this world size, then train a step."""
    return _in_zero(stage, _load, directory)


def _load(rt, directory: str) -> dict:
    model, optimizer, schedule, loader = build(rt, init_seed=5)
    state = Checkpointer(rt, directory, model=model, optimizer=optimizer, scheduler=schedule, loader=loader).resume()
    params, optimizer_state = full_params(rt, model), _whole_optimizer(rt, model, optimizer)
    x, y = next(iter(loader))
    train_step(rt, model, optimizer, schedule, x, y)
    return {
        "world_size": rt.world_size,
        "step": state.step,
        "params": params,
        "optimizer": optimizer_state,
        "trained": not equal(params, full_params(rt, model)),
    }
