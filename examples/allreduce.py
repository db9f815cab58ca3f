"""The smallest paratrain job: every process adds rank + 1, all processes get the sum.

    paratrain run --nproc-per-node 2 examples/allreduce.py
    python examples/allreduce.py            # one process: the sum is 1

With N processes the sum is 1 + 2 + ... + N = N(N+1)/2 on every rank.
"""

import os

import paratrain as pt


def main() -> None:
    rt = pt.Runtime()  # reads RANK/WORLD_SIZE/... from the launcher, joins the group
    try:
        total = pt.all_reduce(float(rt.rank + 1), op="sum")
        expected = rt.world_size * (rt.world_size + 1) / 2
        print(f"rank {rt.rank}/{rt.world_size}: all_reduce(rank + 1) = {total:g}", flush=True)
        assert total == expected, f"rank {rt.rank}: all_reduce gave {total}, expected {expected}"
        where = f"{os.environ.get('MASTER_ADDR', '-')}:{os.environ.get('MASTER_PORT', '-')}"
        pt.print(
            f"all_reduce OK: sum {total:g} over {rt.world_size} processes, backend {rt.backend}, rendezvous {where}"
        )
    finally:
        rt.close()


if __name__ == "__main__":
    main()
