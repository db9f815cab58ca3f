"""The two-machine MNIST tutorial's script rebuilt: two machines joined with a hard-coded tcp:// address (CPU stand-in: digits, gloo).

On each machine (the seed):
    python seed004_tcp_two_machines.py --tcp 'tcp://192.168.10.235:23456' --rank 0
    python seed004_tcp_two_machines.py --tcp 'tcp://192.168.10.235:23456' --rank 1
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torch.utils.data.distributed
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
parser.add_argument('--batch-size', type=int, default=64)
parser.add_argument('--epochs', type=int, default=2)
parser.add_argument('--lr', type=float, default=0.01)
parser.add_argument('--seed', type=int, default=1)
parser.add_argument('--tcp', type=str, default='tcp://192.168.10.235:23456')
parser.add_argument('--rank', type=int, default=0)
args = parser.parse_args()

dist.init_process_group(init_method=args.tcp, backend="gloo", rank=args.rank, world_size=2, group_name="pytorch_test")


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(64, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


model = Net()
torch.manual_seed(args.seed)

images, labels = load_digits(return_X_y=True)
train_dataset = torch.utils.data.TensorDataset(torch.tensor(images, dtype=torch.float32), torch.tensor(labels))
train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True)

model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)


def train(epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if batch_idx % 10 == 0:
            print('Train Epoch: {} [{}/{}]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset), loss.item()))


for epoch in range(1, args.epochs + 1):
    train_sampler.set_epoch(epoch)
    train(epoch)
print("done")
