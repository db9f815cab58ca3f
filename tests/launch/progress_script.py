"""Rank 0's progress bar next to tagged lines; ``--fail`` makes rank 1 raise after joining the group."""

import sys
import time

import paratrain as pt

rt = pt.Runtime()
for step in rt.progress(range(12), desc="steps", mininterval=0):
    time.sleep(0.05)
    if step == 6:
        print(f"rank{rt.rank} halfway", flush=True)
if "--fail" in sys.argv and rt.rank == 1:
    raise ValueError("rank 1 fails on purpose")
rt.close()
