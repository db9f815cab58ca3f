"""A torch.distributed.launch-era script (as in the classic DDP and APEX tutorials): it parses --local_rank itself.

Unchanged, it runs under paratrain with --legacy-local-rank, which passes each worker
its --local_rank=N:

    paratrain run --nproc-per-node 2 --legacy-local-rank examples/legacy_local_rank.py

Without the flag it stops with "the following arguments are required: --local_rank",
as it would under plain torchrun.
"""

import argparse

import torch
import torch.distributed as dist


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, required=True)
    parser.add_argument("--tag", default="legacy", help="printed with the result")
    return parser.parse_args()


def main():
    args = parse()
    if torch.cuda.is_available():
        torch.cuda.set_device(args.local_rank)
        device, backend = torch.device(f"cuda:{args.local_rank}"), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(args.local_rank + 1)], device=device)
    dist.all_reduce(value)
    print(
        f"[{args.tag}] rank {rank}/{world}: --local_rank={args.local_rank}, all_reduce = {value.item():g}", flush=True
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
