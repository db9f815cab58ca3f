"""A two-machine MNIST tutorial's script, converted (see docs/migrate/two-machines-tcp.md).

The same file runs unchanged under every launcher; pt.Runtime() reads who it is from
the environment:

    paratrain run --nproc-per-node 2 examples/migrate/two_machines.py            # one machine
    node0$ paratrain run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 examples/migrate/two_machines.py
    node1$ paratrain run --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 examples/migrate/two_machines.py
    srun -n 2 python examples/migrate/two_machines.py                           # SLURM, no torchrun
    mpirun -np 2 python examples/migrate/two_machines.py                        # OpenMPI
    paratrain run examples/migrate/two_machines.py                              # Kubernetes PyTorchJob (PET_*)

Data: scikit-learn's bundled 8x8 handwritten digits (the tutorial read MNIST IDX files).
Run it again with the same --out to resume from the newest checkpoint.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset

import paratrain as pt


class Net(nn.Module):
    """The tutorial's CNN (torch's classic MNIST example), sized for 8x8 images."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=3, padding=1)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(20 * 2 * 2, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, training=self.training)
        return self.fc2(x)


def digits(train: bool) -> TensorDataset:
    images, labels = load_digits(return_X_y=True)
    images = torch.tensor(images, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
    labels = torch.tensor(labels)
    cut = 1500  # the first 1500 images train, the other 297 test
    part = slice(None, cut) if train else slice(cut, None)
    return TensorDataset(images[part], labels[part])


def main() -> None:
    parser = argparse.ArgumentParser(description="digits CNN on any number of processes and machines")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--out", default="runs/two-machines")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the other processes")
    args = parser.parse_args()

    rt = pt.Runtime(strategy="ddp", seed=1, timeout=args.timeout)  # rank, world, master: from the launcher
    pt.print(f"{rt.world_size} processes started by {rt.process.source}, backend {rt.backend}")
    train = rt.loader(digits(train=True), batch_size=args.batch_size, shuffle=True)  # sharded, set_epoch done
    test = rt.loader(digits(train=False), batch_size=100, exact=True)  # every test image once
    model = Net()  # built after pt.Runtime seeded every rank alike
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    model, optimizer = rt.setup(model, optimizer)
    ckpt = pt.Checkpointer(rt, f"{args.out}/checkpoints", model=model, optimizer=optimizer, loader=train)
    state = ckpt.resume()
    if state is not None:
        pt.print(f"resumed from {state.path.name} (epoch {state.epoch})")

    for epoch in rt.epochs(state, total=args.epochs):
        model.train()
        for images, labels in train:
            loss = F.cross_entropy(model(images), labels)
            rt.backward(loss)
            rt.step(optimizer)
        model.eval()
        with torch.no_grad():
            predictions = [(model(images).argmax(1), labels) for images, labels in test]
        preds, labels = rt.gather(torch.cat([p for p, _ in predictions]), torch.cat([y for _, y in predictions]))
        accuracy = pt.accuracy(preds, labels)
        pt.print(f"epoch {epoch + 1}/{args.epochs}: loss {pt.all_reduce(loss.detach(), 'mean'):.4f} "
                 f"test accuracy {accuracy:.4f} on {len(labels)} images")
        ckpt.save(epoch=epoch, metrics={"accuracy": accuracy})
    rt.close()


if __name__ == "__main__":
    main()
