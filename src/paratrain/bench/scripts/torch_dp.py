"""``torch.nn.DataParallel``: one process, the batch split over the GPUs by threads (the way multi-GPU training starts in most tutorials).

With fewer than two GPUs DataParallel has one device and runs the module as it is.
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader

from paratrain.bench.workload import Workload
from paratrain.data.batches import move_to


def main() -> None:
    wl = Workload.from_argv()
    gpus = min(torch.cuda.device_count(), wl.spec.nproc)
    device = torch.device("cuda:0" if gpus else "cpu")
    model = wl.model().to(device)
    optimizer = wl.optimizer(model)
    model = nn.DataParallel(model, device_ids=list(range(gpus)) or None, output_device=0 if gpus else None)
    loader = DataLoader(wl.train_set, batch_size=wl.batch_size(1), shuffle=False, collate_fn=wl.task.collate)
    amp_dtype = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}.get(wl.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=wl.precision == "fp16-mixed")
    # DataParallel replicates the model and splits the batch onto every one of its GPUs: count them all.
    recorder = wl.recorder(0, 1, device, memory_devices=[torch.device("cuda", i) for i in range(gpus)] or None)
    for batch in loader:
        batch = move_to(batch, device)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss, _ = wl.task.forward(model, batch)
            loss = loss.mean()  # DataParallel returns one loss per device when the model computes it
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        recorder.step(loss)
    recorder.finish(model.module.state_dict())


if __name__ == "__main__":
    main()
    sys.exit(0)
