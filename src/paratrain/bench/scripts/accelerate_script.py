"""Hugging Face Accelerate, as its quick tour writes it: ``accelerate launch script.py``,
``Accelerator()``, ``accelerator.prepare(...)``, ``accelerator.backward(loss)``."""

from __future__ import annotations

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

from paratrain.bench.workload import Workload

MIXED_PRECISION = {"32-true": "no", "bf16-mixed": "bf16", "fp16-mixed": "fp16"}


def main() -> None:
    wl = Workload.from_argv()
    # cpu=True on a machine without GPUs: Accelerate's documented switch; its processes then use gloo.
    accelerator = Accelerator(mixed_precision=MIXED_PRECISION[wl.precision], cpu=not torch.cuda.is_available())
    model = wl.model()
    optimizer = wl.optimizer(model)
    # Batches of one process's share; prepare() gives process r every r-th batch.
    loader = DataLoader(wl.train_set, batch_size=wl.batch_size(accelerator.num_processes), collate_fn=wl.task.collate)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    recorder = wl.recorder(accelerator.process_index, accelerator.num_processes, accelerator.device)
    for batch in loader:
        loss, _ = wl.task.forward(model, batch)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        recorder.step(loss)
    accelerator.wait_for_everyone()
    state = accelerator.get_state_dict(model)
    recorder.finish(state if accelerator.is_main_process else None)
    accelerator.end_training()


if __name__ == "__main__":
    main()
