"""A public nine-way comparison of one Chinese BERT classifier, rebuilt: its mp.spawn variant (multi-gpu-distributed-mp-cls.py), on CPU with gloo.

    python seed003_mp_spawn.py --local_world_size=2
"""
import argparse

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset


def main_worker(local_rank, args):
    dist.init_process_group(backend="gloo", init_method="tcp://localhost:12345",
                            world_size=args.local_world_size, rank=local_rank)
    train_dataset = TensorDataset(torch.randn(256, 16), torch.randint(0, 6, (256,)))
    dev_dataset = TensorDataset(torch.randn(64, 16), torch.randint(0, 6, (64,)))
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
    train_loader = DataLoader(train_dataset, batch_size=32, sampler=train_sampler)
    dev_sampler = torch.utils.data.distributed.DistributedSampler(dev_dataset)
    dev_loader = DataLoader(dev_dataset, batch_size=32, shuffle=False, sampler=dev_sampler)
    model = torch.nn.Linear(16, 6)
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    best_acc = 0.0
    for epoch in range(1, args.epochs + 1):
        train_sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(train_loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            dist.barrier()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if local_rank == 0:
                print("【train】 epoch:{}/{} step:{} loss:{:.6f}".format(epoch, args.epochs, step, loss.item()))
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in dev_loader)
        accuracy = correct / len(dev_loader.dataset)
        if local_rank == 0 and accuracy > best_acc:
            best_acc = accuracy
            torch.save(model.state_dict(), "best.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local-rank", type=int)
    parser.add_argument("--local_world_size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    mp.spawn(main_worker, nprocs=args.local_world_size, args=(args,))
