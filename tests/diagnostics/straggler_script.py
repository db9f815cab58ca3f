"""pt.fit on 2 ranks whose rank 1 can be slowed from outside: its loader sleeps while FLAGS/slow-data exists; the
test puts its process under a CPU quota. Each rank writes its pid to FLAGS/pid-rank<R>; FLAGS/stop ends the run."""

import os
import sys
import time
from pathlib import Path

import torch

import paratrain as pt

out, flags = Path(sys.argv[1]), Path(sys.argv[2])
rank = int(os.environ["RANK"])


class SlowWhenFlagged(torch.utils.data.Dataset):
    def __init__(self, n):
        generator = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 64, generator=generator), torch.randint(0, 10, (n,), generator=generator)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        if rank == 1 and (flags / "slow-data").exists():
            time.sleep(0.001)  # a slow storage read or decode, per sample
        return self.x[index], self.y[index]


class StopOnFlag(pt.Callback):
    def on_step_end(self, trainer, step, loss):
        trainer.should_stop = trainer.should_stop or (flags / "stop").exists()


(flags / f"pid-rank{rank}").write_text(str(os.getpid()))
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
pt.fit(model, SlowWhenFlagged(4096), SlowWhenFlagged(64), out_dir=str(out), max_steps=1_000_000, batch_size=16,
       log_every=10, eval_per_epoch=False, progress=False, callbacks=[StopOnFlag()], seed=1)
