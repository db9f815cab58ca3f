"""A public nine-way comparison of one Chinese BERT classifier, rebuilt: its Horovod variant (multi-gpu-horovod-cls.py).

    horovodrun -np 2 -H localhost:2 python seed003_horovod.py
"""
import horovod.torch as hvd
import torch
from torch.utils.data import DataLoader, TensorDataset

hvd.init()
torch.cuda.set_device(hvd.local_rank())
train_dataset = TensorDataset(torch.randn(256, 16), torch.randint(0, 6, (256,)))
train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
train_loader = DataLoader(train_dataset, batch_size=32, num_workers=2, sampler=train_sampler)
dev_dataset = TensorDataset(torch.randn(64, 16), torch.randint(0, 6, (64,)))
dev_sampler = torch.utils.data.distributed.DistributedSampler(dev_dataset, num_replicas=hvd.size(), rank=hvd.rank())
dev_loader = DataLoader(dev_dataset, batch_size=32, shuffle=False, num_workers=2, sampler=dev_sampler)

model = torch.nn.Linear(16, 6).cuda()
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=hvd.Compression.fp16)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
for epoch in range(1, 3):
    for step, (x, y) in enumerate(train_loader):
        loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print("【train】 epoch:{} step:{} loss:{:.6f}".format(epoch, step, loss.item()))
    with torch.no_grad():  # the post's `loss, accuracy = self.dev(dev_loader)` after each epoch
        correct = sum((model(x.cuda()).argmax(1) == y.cuda()).sum().item() for x, y in dev_loader)
    print("【dev】 epoch:{} accuracy:{:.4f}".format(epoch, correct / len(dev_dataset)))
