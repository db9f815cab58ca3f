"""The reference pair's second half: ``single``'s training with each global batch split in ``nproc``
parts whose mean gradients are averaged — what every data-parallel method computes — in one process,
in plain PyTorch. The same sums, reduced in another order: how far this run drifts from ``single``
is how far a correct method may drift (float rounding, grown by a chaotic training run).
Not a row of the table; run once, untimed."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader

from paratrain.bench.workload import Workload


def split_batch(batch, parts: int) -> list:
    """A collated batch (tensors, or dicts / lists / tuples of them) as ``parts`` equal slices along dim 0."""
    if isinstance(batch, torch.Tensor):
        return list(torch.tensor_split(batch, parts))
    if isinstance(batch, dict):
        pieces = {key: split_batch(value, parts) for key, value in batch.items()}
        return [{key: pieces[key][i] for key in batch} for i in range(parts)]
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], (torch.Tensor, dict, list, tuple)):
        pieces = [split_batch(value, parts) for value in batch]
        return [type(batch)(piece[i] for piece in pieces) for i in range(parts)]
    if isinstance(batch, (list, tuple)):
        size = len(batch) // parts
        return [batch[i * size:(i + 1) * size] for i in range(parts)]
    return [batch] * parts


def main() -> None:
    wl = Workload.from_argv()
    parts = wl.spec.nproc
    model = wl.model()
    optimizer = wl.optimizer(model)
    recorder = wl.recorder(0, 1)
    for batch in DataLoader(wl.train_set, batch_size=wl.spec.global_batch, collate_fn=wl.task.collate):
        optimizer.zero_grad()
        total = 0.0
        for piece in split_batch(batch, parts):
            loss, _ = wl.task.forward(model, piece)
            (loss / parts).backward()
            total += float(loss.detach()) / parts
        optimizer.step()
        recorder.step(total)
    recorder.finish(model.state_dict())


if __name__ == "__main__":
    main()
