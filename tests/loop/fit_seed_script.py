"""A user's script: an own model through pt.fit with seed=7 (tests/loop/test_fit_seed.py runs it).

`python fit_seed_script.py OUT_DIR WEIGHTS`; the tests drop the line marked SEEDING to get the
shape that builds the model before any seed.
"""

import sys

import torch

import paratrain as pt

pt.seed_everything(7)  # SEEDING
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
x = torch.randn(60, 4, generator=torch.Generator().manual_seed(0))
data = torch.utils.data.TensorDataset(x, (x.sum(1) > 0).long())
train, dev = torch.utils.data.Subset(data, range(44)), torch.utils.data.Subset(data, range(44, 60))
pt.fit(model, train, dev, seed=7, epochs=1, batch_size=8, lr=0.05, out_dir=sys.argv[1], progress=False,
       tensorboard=False)
if pt.is_main():
    torch.save(model.state_dict(), sys.argv[2])
