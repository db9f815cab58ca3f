"""The APEX tutorial's script rebuilt: the launcher + APEX amp / DistributedDataParallel / SyncBN (needs APEX and GPUs).

The segmentation model and data are small stand-ins for DeepLab and ADE20k.
"""
# CUDA_VISIBLE_DEVICES=0,1,2,3 python -m torch.distributed.launch --nproc_per_node=4 seed001_apex_launch.py
import argparse
import os

import torch
import torch.distributed
import torch.utils.data
from apex import amp
from apex.parallel import DistributedDataParallel


class SegNet(torch.nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.head = torch.nn.Conv2d(16, num_classes, 1)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))))


class Shapes(torch.utils.data.Dataset):
    def __init__(self, n):
        self.images = torch.randn(n, 3, 32, 32)
        self.masks = (self.images[:, 0] > 0).long()

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], self.masks[i]


def train(epoch, data_loader, model, optimizer):
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss().cuda()
    train_loss = 0.0
    for i, (image, gt) in enumerate(data_loader):
        image, gt = image.cuda(non_blocking=True), gt.cuda(non_blocking=True)
        optimizer.zero_grad()
        loss = loss_fn(model(image), gt)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        train_loss += loss.item()
        optimizer.step()
    if args.local_rank == 0:
        print(f'Epoch : {epoch} , Train_loss : {train_loss / len(data_loader)}')


def main(args):
    model = SegNet(num_classes=2)
    if args.sync_bn:
        import apex
        model = apex.parallel.convert_syncbn_model(model)
    model = model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = amp.initialize(model, optimizer)
    model = DistributedDataParallel(model)

    train_dataset = Shapes(256)
    valid_dataset = Shapes(64)
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
    valid_sampler = torch.utils.data.distributed.DistributedSampler(valid_dataset)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=8, shuffle=(train_sampler is None),
                                               pin_memory=True)
    for i in range(args.epochs):
        train_sampler.set_epoch(i)
        train(i, train_loader, model, optimizer)
        if i % 5 == 0 and args.local_rank == 0:
            os.makedirs(f'./weight/{i}', exist_ok=True)
            checkpoint = {'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'amp': amp.state_dict()}
            torch.save(checkpoint, f'./weight/{i}/weight.pth')


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--local_rank', default=0, type=int)
    parser.add_argument('--epochs', default=2, type=int)
    parser.add_argument('--sync_bn', action='store_true')
    args = parser.parse_args()
    torch.distributed.init_process_group(backend='nccl', init_method='env://')
    torch.cuda.set_device(args.local_rank)
    main(args)
