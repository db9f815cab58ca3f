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


def stopped_while_reporting():
    """Rank 1 fails as a worker stopped mid-exit does: torch elastic's record() has written its
    error file, torch.multiprocessing's traceback file exists but is empty (the worker was
    stopped while writing it). Rank 0 waits to be stopped."""
    import sys
    import time

    from paratrain.env.torchelastic import record_for_launcher

    if int(os.environ["RANK"]) != 1:
        time.sleep(60)
        return "not reached"
    record_for_launcher(RuntimeError("stall: rank 1 stopped in backward (on purpose)"))
    frame = sys._getframe()
    while frame is not None and "error_file" not in frame.f_locals:  # torch.multiprocessing's _wrap
        frame = frame.f_back
    open(frame.f_locals["error_file"], "wb").close()
    os._exit(1)
