"""Horovod, as its PyTorch guide writes it: ``horovodrun -np N -H localhost:N --gloo python script.py``,
``hvd.init()``, ``DistributedSampler(num_replicas=hvd.size(), rank=hvd.rank())``,
``hvd.broadcast_parameters``, ``hvd.DistributedOptimizer``."""

from __future__ import annotations

import horovod.torch as hvd
import torch
from torch.utils.data import DataLoader, DistributedSampler

from paratrain.bench.workload import Workload
from paratrain.data.batches import move_to


def main() -> None:
    hvd.init()
    wl = Workload.from_argv()
    device = torch.device(f"cuda:{hvd.local_rank()}" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = wl.model().to(device)
    optimizer = wl.optimizer(model)  # the global batch is the bench's: no LR scaling by hvd.size()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = DistributedSampler(wl.train_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    loader = DataLoader(wl.train_set, batch_size=wl.batch_size(hvd.size()), sampler=sampler, collate_fn=wl.task.collate)
    amp_dtype = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}.get(wl.precision)
    recorder = wl.recorder(hvd.rank(), hvd.size(), device)
    for batch in loader:
        batch = move_to(batch, device)
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss, _ = wl.task.forward(model, batch)
        loss.backward()
        optimizer.step()
        recorder.step(loss)
    recorder.finish(model.state_dict() if hvd.rank() == 0 else None)
    hvd.shutdown()


if __name__ == "__main__":
    main()
