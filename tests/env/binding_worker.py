"""A worker that reports, after ``pt.Runtime()``, which CPUs each of its threads may use.

Run by ``paratrain run`` (writes ``binding.RANK.json`` into ``$BINDING_OUT``; an argument names a
strategy to set a model up with) and by ``pt.spawn`` (:func:`report`, which returns the same dict)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

import paratrain as pt
from paratrain.env.cpu_binding import decode


def thread_cpus() -> dict[str, list[list[int]]]:
    """Each thread's allowed CPUs by thread name ("main" for the main thread), from /proc."""
    found: dict[str, list[list[int]]] = {}
    for task in Path("/proc/self/task").iterdir():
        fields = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line)
        name = "main" if task.name == str(os.getpid()) else fields["Name"].strip()
        found.setdefault(name, []).append(sorted(decode(fields["Cpus_allowed_list"].strip())[0]))
    return found


def report(strategy: str = "auto") -> dict:
    rt = pt.Runtime(strategy=strategy, **({"zero_stage": 2} if strategy == "deepspeed" else {}))
    try:
        torch.ones(64, 64) @ torch.ones(64, 64)  # OpenMP's pool starts here, from the main thread
        before_setup = {name: len(cpus) for name, cpus in thread_cpus().items()}
        if strategy != "auto":  # DeepSpeed makes its own process groups in setup, after the binding
            model = torch.nn.Linear(8, 2)
            model, optimizer = rt.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
            rt.backward(model(torch.ones(4, 8)).sum(), model)
            rt.step(optimizer, model=model)
        total = pt.all_reduce(1.0, op="sum")
        return {"rank": rt.rank, "share": list(rt.cpu_share) if rt.cpu_share else None, "threads": thread_cpus(),
                "total": total, "before_setup": before_setup}
    finally:
        rt.close()


if __name__ == "__main__":
    seen = report(*sys.argv[1:])
    Path(os.environ["BINDING_OUT"], f"binding.{seen['rank']}.json").write_text(json.dumps(seen))
    sys.exit(0)
