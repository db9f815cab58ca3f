"""``single`` with twice the learning rate: a method that trains something else (parity must flag it)."""

import sys

from torch.utils.data import DataLoader

from paratrain.bench.workload import Workload

if __name__ == "__main__":
    wl = Workload.from_argv()
    model = wl.model()
    optimizer = wl.optimizer(model, lr_scale=2.0)
    recorder = wl.recorder(0, 1)
    for batch in DataLoader(wl.train_set, batch_size=wl.batch_size(1), collate_fn=wl.task.collate):
        loss, _ = wl.task.forward(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        recorder.step(loss)
    recorder.finish(model.state_dict())
    sys.exit(0)
