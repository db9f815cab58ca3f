"""Worker functions for tests/test_comm.py (spawned children import them by module name)."""

import time

import torch

import paratrain as pt


def collectives():
    rt = pt.Runtime()
    try:
        r = rt.rank
        out = {
            "sum": pt.all_reduce(r + 1, op="sum"),
            "mean": pt.all_reduce(float(r), op="mean"),
            "max": pt.all_reduce(torch.tensor([r, -r]), op="max").tolist(),
            "min": pt.all_reduce(torch.tensor([r, -r]), op="min").tolist(),
            "int_mean": pt.all_reduce(torch.tensor(r + 2), op="mean").item(),
            "broadcast": pt.broadcast_object({"from": r} if r == 0 else None),
            "gather": pt.gather_object(f"r{r}"),
            "all_gather_object": pt.all_gather_object(r * 10),
            # rank r contributes r+1 rows: uneven first dimensions
            "all_gather": [t.tolist() for t in pt.all_gather(torch.full((r + 1, 2), float(r)))],
            "scalar_gather": [t.tolist() for t in pt.all_gather(torch.tensor(float(r)))],
        }
        order = []
        with pt.main_first():
            order.append((r, time.monotonic()))
        out["main_first_t"] = order[0][1]
        out["all_first_t"] = pt.all_gather_object(order[0][1])
        return out
    finally:
        rt.close()


def late_rank():
    """Rank 1 arrives at the barrier 6 s late; the others' timeout is 2 s."""
    rt = pt.Runtime(timeout=30)
    try:
        if rt.rank == 1:
            time.sleep(6)
            return None
        try:
            pt.barrier(timeout=2, name="epoch-end barrier")
        except pt.CollectiveTimeoutError as exc:
            return {"message": str(exc), "late": exc.late_ranks}
        return {"message": "no error"}
    finally:
        rt.close()
