"""Top-level worker functions for pt.spawn tests (spawned children import them)."""

import os

import paratrain as pt


def reduce_ranks(scale):
    rt = pt.Runtime()
    try:
        total = pt.all_reduce(float(rt.rank + 1) * scale, op="sum")
        return {
            "rank": rt.rank,
            "world": rt.world_size,
            "total": total,
            "addr": os.environ["MASTER_ADDR"],
            "gloo_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
            "extra": os.environ.get("PARATRAIN_TEST_EXTRA"),
        }
    finally:
        rt.close()


def fail_on_rank_one():
    if int(os.environ["RANK"]) == 1:
        raise ValueError("bad batch shape on purpose")
    return "ok"
