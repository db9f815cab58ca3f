"""paratrain's own loop on its public API.

``python paratrain_loop.py SPEC`` (single), or
``paratrain run --nproc-per-node N paratrain_loop.py SPEC`` (ddp, ddp-amp, fsdp, hsdp, deepspeed):
the strategy and precision come from the spec, and so do hsdp's mesh (``replicate``, ``shard``)
and the settings ``paratrain bench --tune`` tries: ``compile``, ``grad_compression`` (ddp) and
``grad_accum`` (each process's share of the global batch in that many micro-batches, one
optimizer step over them).
"""

from __future__ import annotations

import sys

import torch

import paratrain as pt
from paratrain.bench.workload import Workload
from paratrain.data.batches import move_to


def train(spec_file: str) -> None:
    wl = Workload.from_argv([spec_file])
    strategy = wl.option("strategy", "auto")
    strategy_options = {"zero_stage": wl.option("zero_stage")} if strategy == "deepspeed" else {}
    if wl.option("grad_compression") not in (None, "none"):
        strategy_options["grad_compression"] = wl.option("grad_compression")
    strategy_options.update({name: wl.option(name) for name in ("replicate", "shard") if wl.option(name) is not None})
    rt = pt.Runtime(strategy=strategy, precision=wl.precision, seed=wl.spec.seed, compile=bool(wl.option("compile")),
                    **strategy_options)
    model = wl.model()
    model, optimizer = rt.setup(model, wl.optimizer(model))
    accumulation = int(wl.option("grad_accum") or 1)
    loader = rt.loader(wl.train_set, batch_size=wl.batch_size(rt.world_size) // accumulation, collate_fn=wl.task.collate)
    recorder = wl.recorder(rt.rank, rt.world_size, rt.device)
    if accumulation == 1:
        for batch in loader:
            batch = move_to(batch, rt.device)
            with rt.autocast():
                loss, _ = wl.task.forward(model, batch)
            rt.backward(loss, model)
            rt.step(optimizer, model=model)
            recorder.step(loss)
    else:
        if rt.is_main:  # in the method's log: what this run measured
            print(f"{accumulation} micro-batches of {loader.batch_size} per process per step", flush=True)
        micro_losses = []
        for batch in loader:
            batch = move_to(batch, rt.device)
            with rt.accumulate(model, steps=accumulation):
                with rt.autocast():
                    loss, _ = wl.task.forward(model, batch)
                rt.backward(loss, model)
                rt.step(optimizer, model=model)
            micro_losses.append(loss.detach())
            if len(micro_losses) == accumulation:  # equal micro-batches: their mean is the step's loss
                recorder.step(torch.stack(micro_losses).float().mean())
                micro_losses = []
    state = rt.strategy.model_state_dict(model)  # collective for fsdp and deepspeed
    recorder.finish(state if rt.is_main else None)
    del model, optimizer, state
    rt.close()


if __name__ == "__main__":
    train(sys.argv[1])
