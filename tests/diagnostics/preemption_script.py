"""An own loop that saves only when ``rt.preemption()`` says so: ``preemption_script.py DIR STEPS``.

Rank 0 writes the number of finished steps to DIR/steps.txt; DIR/resumed.txt says where a
rerun started.
"""

import os
import sys
from pathlib import Path

import torch

import paratrain as pt


def main():
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    rt = pt.Runtime(strategy="ddp", seed=3)
    inputs = torch.randn(64, 5, generator=torch.Generator().manual_seed(1))
    data = torch.utils.data.TensorDataset(inputs, inputs @ torch.arange(5.0))
    model = torch.nn.Linear(5, 1)
    model, optimizer = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    loader = rt.loader(data, batch_size=4, shuffle=True)
    ckpt = pt.Checkpointer(rt, out / "checkpoints", model=model, optimizer=optimizer, loader=loader)
    state = ckpt.resume()
    step = state.step if state else 0
    if rt.is_main:
        (out / "resumed.txt").write_text(str(step))
    with rt.preemption() as preemption:
        while step < steps:
            for x, y in loader:
                rt.backward(torch.nn.functional.mse_loss(model(x).squeeze(1), y))
                rt.step(optimizer)
                step += 1
                if preemption.should_save():
                    ckpt.save(step=step, epoch=loader.epoch)
                preemption.stop_if_preempted()
                if rt.is_main:  # replaced whole: the test polls it and must never read it half-written
                    (out / "steps.tmp").write_text(str(step))
                    os.replace(out / "steps.tmp", out / "steps.txt")
                if step == steps:
                    break
    ckpt.save(step=step, epoch=loader.epoch)
    rt.close()


if __name__ == "__main__":
    main()
