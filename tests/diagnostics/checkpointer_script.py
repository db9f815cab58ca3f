"""An own loop with ``Checkpointer`` that resumes wherever it was stopped: ``checkpointer_script.py DIR STEPS``.

It saves after every step, so a kill loses at most the step in progress; under
``paratrain run --max-restarts`` each restart continues from the newest complete
checkpoint. At the end rank 0 writes the weights to DIR/final.safetensors.
"""

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

import paratrain as pt


def main():
    out, steps = Path(sys.argv[1]), int(sys.argv[2])
    rt = pt.Runtime(strategy="ddp", seed=3)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(64, 5, generator=generator)
    data = torch.utils.data.TensorDataset(inputs, inputs @ torch.arange(5.0))
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = rt.setup(model, optimizer)
    loader = rt.loader(data, batch_size=4, shuffle=True)
    ckpt = pt.Checkpointer(rt, out / "checkpoints", keep_last=2, model=model, optimizer=optimizer, loader=loader)
    state = ckpt.resume()
    step = state.step if state else 0
    while step < steps:
        for x, y in loader:  # each new pass is the next epoch; a resumed one continues at its saved batch
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            rt.backward(loss)
            rt.step(optimizer)
            step += 1
            ckpt.save(step=step, epoch=loader.epoch)
            if step == steps:
                break
    if rt.is_main:
        save_file({k: v.contiguous() for k, v in rt.unwrap(model).state_dict().items()}, str(out / "final.safetensors"))
    del model, optimizer, ckpt
    rt.close()


if __name__ == "__main__":
    main()
