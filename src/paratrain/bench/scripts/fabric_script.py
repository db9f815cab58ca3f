"""Lightning Fabric, as its docs write it: ``Fabric(...)``, ``fabric.launch()``, ``fabric.setup``,
``fabric.setup_dataloaders``, ``fabric.backward(loss)``."""

from __future__ import annotations

import torch
from lightning.fabric import Fabric
from torch.utils.data import DataLoader

from paratrain.bench.workload import Workload

PRECISION = {"32-true": "32-true", "bf16-mixed": "bf16-mixed", "fp16-mixed": "16-mixed"}


def main() -> None:
    wl = Workload.from_argv()
    devices = wl.spec.nproc
    fabric = Fabric(
        accelerator="cuda" if torch.cuda.is_available() else "cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        precision=PRECISION[wl.precision],
    )
    fabric.launch()  # starts the other processes by running this script again
    model = wl.model()
    optimizer = wl.optimizer(model)
    model, optimizer = fabric.setup(model, optimizer)
    # setup_dataloaders adds a DistributedSampler (no shuffling: the data is already in the bench's order).
    loader = fabric.setup_dataloaders(DataLoader(wl.train_set, batch_size=wl.batch_size(fabric.world_size), collate_fn=wl.task.collate))
    recorder = wl.recorder(fabric.global_rank, fabric.world_size, fabric.device)
    for batch in loader:
        loss, _ = wl.task.forward(model, batch)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        recorder.step(loss)
    fabric.barrier()
    recorder.finish(model.module.state_dict() if fabric.global_rank == 0 else None)


if __name__ == "__main__":
    main()
