"""What a background save's writing thread costs a training step that holds the interpreter lock — a CPU stand-in
for a GPU step, whose training thread spends its time in Python launching kernels.

    PYTHONPATH=src python benchmarks/launch_bound_saves.py [--steps 400] [--rounds 2] [--tiny-layers 60]

One process, one compute thread (so the writing thread has a core of its own: what it costs here is the lock, not
the CPU). The model: an embedding and four 128x512 layers (the bulk of the checkpoint, about text-cls's size) and
``--tiny-layers`` 16x16 layers, whose steps are many small operations, each a call into torch from Python, as a GPU step's kernel launches are. Each
round runs ``none`` (no saves) and ``background`` (``pt.Checkpointer(..., background=True)``, a save every 10
steps) one after the other. Printed per run: the median step, the steps just after a save (the next four, while
the writing thread writes) against the steps far from one (the four before the next save) in the same run, the
save's blocking (median, p99), and the writing thread's CPU per write (``time.thread_time`` inside it).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import paratrain as pt  # noqa: E402
from paratrain.checkpoint import background  # noqa: E402

SAVE_EVERY = 10
NEAR, FAR = (1, 2, 3, 4), (6, 7, 8, 9)  # steps after a save: while it is written; before the next one


class LaunchBound(torch.nn.Module):
    def __init__(self, tiny_layers: int):
        super().__init__()
        self.payload = torch.nn.Embedding(5000, 128)
        self.big = torch.nn.ModuleList(torch.nn.Linear(128, 512) for _ in range(4))
        self.tiny = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(tiny_layers))

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        h = self.payload(ids).mean(1)
        for layer in self.big:
            h = h + layer(h)[:, :128]
        for layer in self.tiny:
            x = torch.relu(layer(x))
        return h.sum() + x.sum()


def writer_cpu_per_write() -> list[float]:
    """Wrap the writing thread's work so that each write's own CPU time is recorded."""
    seconds: list[float] = []
    original = background.BackgroundWrite._run

    def timed(self) -> None:
        began = time.thread_time()
        try:
            original(self)
        finally:
            seconds.append(time.thread_time() - began)

    background.BackgroundWrite._run = timed
    return seconds


def run(mode: str, steps: int, tiny_layers: int, folder: Path, cpu: list[float]) -> dict:
    torch.manual_seed(0)
    rt = pt.Runtime(strategy="single", seed=0)
    model = LaunchBound(tiny_layers)
    model, optimizer = rt.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    ids, x = torch.randint(0, 5000, (4, 8)), torch.randn(4, 16)
    directory = folder / mode
    shutil.rmtree(directory, ignore_errors=True)
    ckpt = pt.Checkpointer(rt, directory, model=model, optimizer=optimizer, background=mode == "background", keep_last=2)
    del cpu[:]
    step_s, save_s = [], []
    for step in range(1, steps + 1):
        began = time.perf_counter()
        rt.backward(model(ids, x))
        rt.step(optimizer)
        step_s.append(time.perf_counter() - began)
        if mode != "none" and step % SAVE_EVERY == 0:
            began = time.perf_counter()
            ckpt.save(step=step)
            save_s.append(time.perf_counter() - began)
    ckpt.finish_writing("the end of the run", say=False)
    rt.close()
    timed = range(5 * SAVE_EVERY, steps)  # after the first saves (the first is written in the foreground)
    near = [step_s[i] for i in timed if (i + 1) % SAVE_EVERY in NEAR]
    far = [step_s[i] for i in timed if (i + 1) % SAVE_EVERY in FAR]
    blocking = sorted(save_s[5:])
    return {"mode": mode, "step_ms": statistics.median(step_s[i] for i in timed) * 1e3,
            "near_vs_far": statistics.mean(near) / statistics.mean(far) - 1,
            "blocking_p50_ms": statistics.median(blocking) * 1e3 if blocking else None,
            "blocking_p99_ms": blocking[min(len(blocking) - 1, int(0.99 * len(blocking)))] * 1e3 if blocking else None,
            "writer_cpu_ms": statistics.median(cpu[5:]) * 1e3 if len(cpu) > 5 else None,
            "parameters": sum(p.numel() for p in model.parameters()), "tensors": len(model.state_dict())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tiny-layers", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cpu = writer_cpu_per_write()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            for mode in ("none", "background"):
                rows.append(run(mode, args.steps, args.tiny_layers, Path(folder), cpu))
    first = rows[0]
    print(f"## a launch-bound step and background saves: {first['parameters']:,} parameters in {first['tensors']} "
          f"tensors (AdamW), 1 process, 1 compute thread, a save every {SAVE_EVERY} steps, {args.steps} steps, "
          f"{args.rounds} round(s)\n")
    print("| saves | step (median) | steps just after a save vs far from one | blocking p50 | blocking p99 | "
          "p99 / step | writing thread's CPU per write |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        blocking = row["blocking_p50_ms"] is not None
        print(f"| {row['mode']} | {row['step_ms']:.1f} ms | {row['near_vs_far'] * 100:+.1f} % | "
              + (f"{row['blocking_p50_ms']:.1f} ms | {row['blocking_p99_ms']:.1f} ms | "
                 f"{row['blocking_p99_ms'] / row['step_ms'] * 100:.1f} % | {row['writer_cpu_ms']:.0f} ms |"
                 if blocking else "— | — | — | — |"))


if __name__ == "__main__":
    main()
