"""Top-level worker functions for the diagnostics tests (spawned children import them)."""

from __future__ import annotations

import paratrain as pt
from paratrain.diagnostics.link_probe import measure_allreduce


def probe_link(sizes: tuple[int, ...], repeats: int) -> list[dict]:
    """Every rank's measurement, as dicts, in rank order (rank 0's return value)."""
    rt = pt.Runtime(strategy="ddp", timeout=60)
    measured = measure_allreduce(sizes, repeats=repeats)
    everyone = pt.all_gather_object(measured.to_dict())
    rt.close()
    return everyone


def probe_while_rank1_stays_away() -> None:
    """Rank 0 probes; rank 1 never calls the probe (it sleeps, then leaves)."""
    import time

    rt = pt.Runtime(strategy="ddp", timeout=3)
    if rt.rank == 0:
        measure_allreduce((4096,), repeats=1)
    else:
        time.sleep(5)
