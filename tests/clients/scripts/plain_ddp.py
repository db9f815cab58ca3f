"""A plain DDP training script, as the tutorials write it: init_process_group from the
launcher's environment, DistributedSampler, DDP, rank 0 saves a checkpoint every few steps
with torch.save and every rank resumes from it. Nothing of paratrain.

    python plain_ddp.py OUT [--steps N] [--save-every K] [--die-at STEP]

``--die-at STEP`` makes rank 1 kill itself with SIGKILL at that step of the first attempt.
Rank 0 writes OUT/final.pt at the end; each rank writes OUT/cpus.RANK, the CPUs its main thread
may use once it joined the group.
"""

import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=24)
parser.add_argument("--save-every", type=int, default=4)
parser.add_argument("--die-at", type=int, default=-1)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
with open(os.path.join(args.out, f"cpus.{rank}"), "w") as cpus:  # the CPUs this thread may compute on now
    cpus.write(" ".join(map(str, sorted(os.sched_getaffinity(0)))))
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=4, sampler=sampler)
per_epoch = len(loader)

ckpt = os.path.join(args.out, "ckpt.pt")
step = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt, weights_only=True)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
print(f"attempt {attempt} starts at step {step}", flush=True)

while step < args.steps:
    epoch, skip = divmod(step, per_epoch)
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(loader):
        if i < skip:
            continue
        if attempt == 0 and rank == 1 and step == args.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % args.save_every == 0:
            if rank == 0:
                tmp = ckpt + ".tmp"
                torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
                os.replace(tmp, ckpt)
            dist.barrier()
        if step >= args.steps:
            break

if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(args.out, "final.pt"))
dist.destroy_process_group()
