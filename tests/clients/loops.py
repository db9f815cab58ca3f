"""Loop shapes that real trainers use, re-created on ``pt.Runtime`` (our own code, no copies).

* ``prefetch`` — a GPT trainer in the nanoGPT style: counted in iterations, gradient accumulation,
  the next batch drawn between the forward and the backward of each micro-step (to overlap data
  and compute), a checkpoint at the top of an iteration — while a drawn batch waits untrained.
* ``top_save`` — epochs over the loader, a checkpoint at the top of the body (before the batch
  the ``for`` just handed out is trained), as loops that save "every N steps" before the step do.
* ``iterations`` — counted in optimizer steps: ``rt.epochs(state)`` without a total, one batch
  stream across epochs, ``if rt.step(opt): step += 1`` with accumulation, a save after the step.

Each records, per rank, the sample ids it trained, so a stopped-and-resumed run can be compared
with one that never stopped: the same samples in the same order and the same final weights.

Called by ``pt.spawn`` (:func:`stop_and_resume`), or run as a script by ``paratrain run`` (the
kill soak, ``benchmarks/client_kill_soak.py``)::

    loops.py DIRECTORY --shape prefetch [--steps N] [--save-every K] [--progress FILE]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import paratrain as pt

SAMPLES, BATCH, FEATURES = 24, 2, 4  # on 2 ranks: 6 batches of 2 per rank and epoch


def dataset() -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    return torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True).sin(), torch.arange(SAMPLES))


class Stop(Exception):
    """The run ends right after a save, as a crash there would end it (nothing later is kept)."""


def train(rt: pt.Runtime, directory: str, shape: str, steps: int, save_every: int, stop_at: int | None = None,
          num_workers: int = 0, global_order: bool = False, progress: str | None = None,
          step_seconds: float = 0.0) -> dict:
    """One run of ``shape`` on every rank; this rank's trained sample ids and rank 0's final weights.

    ``stop_at``: end right after the save at that step (the stopped half of a resumed run).
    """
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = rt.setup(model, optimizer)
    options = {"global_order": True, "grad_accum": 1} if global_order else {}
    data = rt.loader(dataset(), batch_size=BATCH, shuffle=True, num_workers=num_workers, **options)
    ckpt = pt.Checkpointer(rt, directory, model=model, optimizer=optimizer, loader=data, keep_last=2)
    state = ckpt.resume()
    trained: list[int] = []

    def save(step: int, epoch: int | None = None) -> None:
        ckpt.save(step=step, epoch=epoch)
        if step == stop_at:
            raise Stop

    def note(step: int) -> None:
        if progress and rt.is_main:
            Path(progress).write_text(str(step))
        time.sleep(step_seconds)

    try:
        LOOPS[shape](rt, model, optimizer, data, state, steps, save_every, save, note, trained)
    except Stop:
        ckpt.close()
        return {"trained": trained, "stopped": True}
    weights = rt.full_state_dict(model)  # collective; rank 0's dict
    ckpt.close()
    return {"trained": trained, "weights": {name: tensor.tolist() for name, tensor in weights.items()},
            "resumed_from": state.step if state else 0}


def _loss(model, x, y) -> torch.Tensor:
    return F.mse_loss(model(x), y)


def prefetch(rt, model, optimizer, data, state, steps, save_every, save, note, trained) -> None:
    """nanoGPT's shape: iterations counted by the loop, the next batch drawn mid-micro-step."""
    accumulation = getattr(data, "accumulation", 2)  # the global order's micro-batches per step
    stream = itertools.chain.from_iterable(itertools.repeat(data))  # each pass over the loader is the next epoch
    x, y, ids = next(stream)
    iteration = state.step if state else 0
    while True:
        if iteration % save_every == 0 and iteration > 0:
            save(iteration)  # the top of the iteration: batch x is drawn and not trained yet
        if iteration == steps:
            break
        for _ in range(accumulation):
            with rt.accumulate(model, steps=accumulation):
                loss = _loss(model, x, y)
                trained.extend(ids.tolist())
                x, y, ids = next(stream)  # fetch the next batch while the backward would run on a GPU
                rt.backward(loss)
                rt.step(optimizer)
        iteration += 1
        note(iteration)


def top_save(rt, model, optimizer, data, state, steps, save_every, save, note, trained) -> None:
    """Epochs over the loader; the checkpoint comes at the top of the body, before the batch's step."""
    step = state.step if state else 0
    saved = step
    epochs = -(-steps * pt.world_size() * BATCH // SAMPLES)  # enough epochs for ``steps``
    for epoch in rt.epochs(state, total=epochs):
        for x, y, ids in data:
            if step % save_every == 0 and step > saved:
                saved = step
                save(step, epoch)
            if step == steps:
                return
            rt.backward(_loss(model, x, y))
            rt.step(optimizer)
            trained.extend(ids.tolist())
            step += 1
            note(step)


def iterations(rt, model, optimizer, data, state, steps, save_every, save, note, trained) -> None:
    """Counted in optimizer steps: no epoch total, one stream of batches, the step's own answer."""
    step = state.step if state else 0
    batches = (batch for _ in rt.epochs(state) for batch in data)
    while step < steps:
        x, y, ids = next(batches)
        with rt.accumulate(model, steps=2):
            rt.backward(_loss(model, x, y))
            trained.extend(ids.tolist())
            if rt.step(optimizer):
                step += 1
                note(step)
                if step % save_every == 0:
                    save(step)


LOOPS = {"prefetch": prefetch, "top_save": top_save, "iterations": iterations}


def stop_and_resume(root: str, runs: list[dict]) -> dict:
    """For each run (``shape``, ``steps``, ``save_every``, ``stop_at`` and loader options): the
    uninterrupted run, and a run stopped right after its save at ``stop_at`` then resumed, in one
    job (one start-up). Every rank's trained ids are gathered; rank 0 answers."""
    rt = pt.Runtime(strategy="ddp", seed=5)
    try:
        results = {}
        for index, run in enumerate(runs):
            options = {key: value for key, value in run.items() if key not in ("name", "stop_at", "zero_stage")}
            started = time.perf_counter()
            # A DeepSpeed engine's Runtime joins the group this one made (as the deepspeed tests do).
            engine_rt = pt.Runtime(strategy="deepspeed", seed=5, zero_stage=run["zero_stage"]) if "zero_stage" in run else rt
            whole = train(engine_rt, f"{root}/{index}-whole", **options)
            stopped = train(engine_rt, f"{root}/{index}-resumed", **options, stop_at=run["stop_at"])
            resumed = train(engine_rt, f"{root}/{index}-resumed", **options)
            if engine_rt is not rt:
                gc.collect()
                engine_rt.close()
            results[run["name"]] = {
                "whole": pt.all_gather_object(whole["trained"]),
                "resumed": pt.all_gather_object(stopped["trained"] + resumed["trained"]),
                "same_weights": whole["weights"] == resumed["weights"],
                "resumed_from": resumed["resumed_from"],
                "seconds": time.perf_counter() - started,
            }
        return results
    finally:
        gc.collect()  # the DDP models go before the process group (pytorch/pytorch#56297)
        rt.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--shape", choices=sorted(LOOPS), default="prefetch")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save-every", type=int, default=3)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--progress", help="rank 0 writes the step it reached here")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep after each step (a slower model)")
    args = parser.parse_args()
    rt = pt.Runtime(strategy="ddp", seed=5)
    done = train(rt, os.path.join(args.directory, "checkpoints"), args.shape, args.steps, args.save_every,
                 num_workers=args.num_workers, progress=args.progress, step_seconds=args.step_seconds)
    if rt.is_main:
        final = {"weights": done["weights"], "resumed_from": done["resumed_from"]}
        Path(args.directory, "final.json").write_text(json.dumps(final))
    gc.collect()
    rt.close()


if __name__ == "__main__":
    main()
