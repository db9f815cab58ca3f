"""paratrain's own loop on its public API.

``python paratrain_loop.py SPEC`` (single), or
``paratrain run --nproc-per-node N paratrain_loop.py SPEC`` (ddp, ddp-amp, fsdp, deepspeed):
the strategy and precision come from the spec.
"""

from __future__ import annotations

import sys

import paratrain as pt
from paratrain.bench.workload import Workload
from paratrain.loop.batches import move_to


def train(spec_file: str) -> None:
    wl = Workload.from_argv([spec_file])
    strategy_options = {"zero_stage": wl.option("zero_stage")} if wl.option("strategy") == "deepspeed" else {}
    rt = pt.Runtime(strategy=wl.option("strategy", "auto"), precision=wl.precision, seed=wl.spec.seed, **strategy_options)
    model = wl.model()
    model, optimizer = rt.setup(model, wl.optimizer(model))
    loader = rt.loader(wl.train_set, batch_size=wl.batch_size(rt.world_size), collate_fn=wl.task.collate)
    recorder = wl.recorder(rt.rank, rt.world_size, rt.device)
    for batch in loader:
        batch = move_to(batch, rt.device)
        with rt.autocast():
            loss, _ = wl.task.forward(model, batch)
        rt.backward(loss, model)
        rt.step(optimizer, model=model)
        recorder.step(loss)
    state = rt.strategy.model_state_dict(model)  # collective for fsdp and deepspeed
    recorder.finish(state if rt.is_main else None)
    del model, optimizer, state
    rt.close()


if __name__ == "__main__":
    train(sys.argv[1])
