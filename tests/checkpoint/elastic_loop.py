"""An own training loop on the job's global order with a Checkpointer (no pt.fit): stopped
after some steps, resumed on another number of processes (fp32, no dropout).

Called by pt.spawn (:func:`train`, :func:`reference_and_stopped`), or run as a script by
``paratrain run``::

    elastic_loop.py DIRECTORY --batch-size B --grad-accum A [--stop-after K]
"""

from __future__ import annotations

import argparse
import gc
import warnings

import torch

import paratrain as pt

SAMPLES, EPOCHS = 53, 2  # global batch 12: 4 full global batches and a short one of 5 per epoch


def dataset() -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 6, generator=generator)
    return torch.utils.data.TensorDataset(x, ((x[:, 0] + x[:, 1] * x[:, 2]) > 0).long())


def train(directory: str, batch_size: int, grad_accum: int, stop_after: int | None = None) -> dict:
    """One run of the loop on every rank of the job; rank 0's result."""
    rt = pt.Runtime(strategy="ddp", seed=7)
    try:
        return _train(rt, directory, batch_size, grad_accum, stop_after)
    finally:
        gc.collect()  # the DDP model goes before its process group (pytorch/pytorch#56297)
        rt.close()


def reference_and_stopped(reference: str, stopped: str, batch_size: int, grad_accum: int, stop_after: int) -> dict:
    """The uninterrupted run and a run stopped after ``stop_after`` steps, in one job (one start-up)."""
    rt = pt.Runtime(strategy="ddp", seed=7)
    try:
        whole = _train(rt, reference, batch_size, grad_accum, None)
        _train(rt, stopped, batch_size, grad_accum, stop_after)
        return whole
    finally:
        gc.collect()
        rt.close()


def _train(rt, directory: str, batch_size: int, grad_accum: int, stop_after: int | None) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = rt.setup(model, optimizer)
    train_data = rt.loader(dataset(), batch_size=batch_size, shuffle=True, global_order=True, grad_accum=grad_accum)
    ckpt = pt.Checkpointer(rt, directory, model=model, optimizer=optimizer, loader=train_data)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        state = ckpt.resume()
    step = state.step if state else 0
    for epoch in rt.epochs(state, total=EPOCHS):
        for x, y in train_data:
            micro = train_data.current  # this micro-batch's place in its global batch
            with rt.accumulate(model, steps=micro.micro_steps, sync=micro.sync):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                rt.backward(loss * micro.loss_weight)  # the global batch's mean, however it is split
                rt.step(optimizer)
            step += micro.sync
            if micro.sync and step == stop_after:
                ckpt.save(step=step, epoch=epoch)
                ckpt.close()
                return {"steps": step}
        ckpt.save(step=step, epoch=epoch)
    weights = rt.full_state_dict(model)  # collective; whole tensors on rank 0
    ckpt.close()
    return {
        "steps": step,
        "resumed_from": state.step if state else 0,
        "world_size": rt.world_size,
        "split": [train_data.batch_size, train_data.accumulation, train_data.global_batch],
        "said": [str(w.message) for w in said],
        "weights": {name: tensor.flatten().tolist() for name, tensor in weights.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--stop-after", type=int)
    args = parser.parse_args()
    train(args.directory, args.batch_size, args.grad_accum, args.stop_after)


if __name__ == "__main__":
    main()
