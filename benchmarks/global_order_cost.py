"""What does the global order cost per step, next to the per-rank order it replaced in pt.fit?

The only extra work of :mod:`paratrain.data.global_order` is on the host, once per pass:
the epoch's order cut into global batches and this rank's micro-batches of each (a
Python list per micro-batch), against the per-rank sampler's one list of indices. This
times both for one rank of a large job, per optimizer step, with and without length
grouping, plus the loss weighting of a short last batch (one multiplication per micro-batch
there, none elsewhere: an even split has weight 1.0 and is not multiplied).

    python benchmarks/global_order_cost.py [--samples 1000000] [--world 8] [--batch 32] [--accum 2]

Measured on the 2-core development machine (shared, so noisy), defaults: per pass 207.5 ms before
and 241.7 ms now (+17 µs per step), grouped by length 1892.8 ms and 1992.4 ms (+51 µs per step),
for 1954 steps — paid on the host when each pass starts. ``benchmarks/loop_overhead.py --models mlp
--worlds 2`` showed no difference above its noise (fit/hand 1.00 before, 0.83 after: the same
code path measured twice moves more than that on this machine).
"""

from __future__ import annotations

import argparse
import statistics
import time

from paratrain.data.global_order import GlobalBatchSampler, Split
from paratrain.data.sampler import ResumableDistributedSampler


def seconds(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, world, batch, accum = args.samples, args.world, args.batch, args.accum
    lengths = [(7919 * i) % 512 for i in range(n)]
    split = Split(world, batch, accum)
    print(f"{n} samples, {world} ranks × batch {batch} × accumulation {accum} = global batch {split.global_batch}")
    print(f"{'order':<22} {'grouped':>7} {'per pass ms':>11} {'steps':>6} {'per step us':>11}")
    for grouped in (False, True):
        per_rank = ResumableDistributedSampler(n, world, 0, seed=1, group_by_length=lengths if grouped else None,
                                               batch_size=batch * accum)
        global_order = GlobalBatchSampler(n, split, 0, seed=1, group_by_length=lengths if grouped else None)
        steps = global_order.batches_per_epoch
        for name, fn in (("per-rank (before)", lambda: per_rank.epoch_indices()),
                         ("global order (now)", lambda: list(iter(global_order)))):
            s = seconds(fn, args.rounds)
            print(f"{name:<22} {str(grouped):>7} {s * 1e3:>11.1f} {steps:>6} {s / steps * 1e6:>11.1f}")


if __name__ == "__main__":
    main()
