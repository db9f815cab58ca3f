"""Two "PCs" with two processes each on a slow LAN: samples/s and bytes on the link for ddp, fsdp, hsdp.

Builds two network namespaces joined by a veth pair whose ends ``tc`` limits to each rate
(``tests/netns.py``) and runs this file under ``paratrain run --nnodes 2 --nproc-per-node 2`` in
each, once per strategy, the strategies' order alternating between repetitions. Every rank trains
an MLP of ``--depth`` blocks of ``--width`` × ``--width`` (big enough that sharding matters: its
gradients are what crosses the link) on random data; rank 0 times ``--steps`` steps after two
warm-up steps and reads its namespace's end of the veth pair before and after them
(``/sys/class/net/IF/statistics/{tx,rx}_bytes``, the interface paratrain exported as
``GLOO_SOCKET_IFNAME``): every byte between the two nodes passes there, counted by the kernel.
Traffic between the two processes of one node stays on the node (their own addresses route
through loopback), as on a real machine.

Needs root and iproute2. Run from the repository root::

    python3 benchmarks/hsdp_link.py                           # 100mbit and 1gbit, width 1024, depth 8
    python3 benchmarks/hsdp_link.py --rates 100mbit --repeats 3 --steps 5

Prints one table per rate: samples/s (median and range over the repetitions), bytes across the
link per step, and samples/s over fsdp's; ``--json FILE`` keeps it all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("ddp", "fsdp", "hsdp")
PORT = 29541


def worker(strategy: str, out: str, steps: int, width: int, depth: int, batch: int) -> None:
    """One rank of the job: train, time ``steps`` steps, count the bytes on the link (rank 0)."""
    import torch

    import paratrain as pt

    class Blocks(torch.nn.Module):
        """A ModuleList of blocks: fsdp and hsdp shard each block as a unit (their default)."""

        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

        def forward(self, x):
            for block in self.blocks:
                x = torch.tanh(block(x))
            return x

    rt = pt.Runtime(strategy=strategy, seed=0)
    model = Blocks()
    model, optimizer = rt.setup(model, torch.optim.SGD(model.parameters(), lr=1e-3))
    x = torch.randn(batch, width)

    def step() -> None:
        loss = model(x).square().mean()
        rt.backward(loss)
        rt.step(optimizer)

    for _ in range(2):
        step()
    interface = os.environ.get("GLOO_SOCKET_IFNAME", "")
    counters = [Path(f"/sys/class/net/{interface}/statistics/{kind}_bytes") for kind in ("tx", "rx")]
    pt.barrier()
    before = sum(int(c.read_text()) for c in counters) if interface else 0
    start = time.perf_counter()
    for _ in range(steps):
        step()
    pt.barrier()
    seconds = time.perf_counter() - start
    after = sum(int(c.read_text()) for c in counters) if interface else 0
    if rt.is_main:
        Path(out).write_text(json.dumps({
            "samples_per_s": steps * batch * rt.world_size / seconds, "step_s": seconds / steps,
            "link_bytes_per_step": (after - before) / steps, "interface": interface,
            "parameters": sum(p.numel() for p in model.parameters()),
        }))
    rt.close()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "TORCHELASTIC", "GLOO_", "NCCL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def two_nodes(args: argparse.Namespace, hosts, strategy: str, out: Path) -> dict:
    """This file under ``paratrain run`` on node 0 and node 1, two processes each."""
    words = [sys.executable, "-m", "paratrain", "run", "--nnodes", "2", "--nproc-per-node", "2",
             "--master-addr", hosts[0].address, "--master-port", str(PORT), "--cpu-binding", "none",
             __file__, "--worker", strategy, str(out), str(args.steps), str(args.width), str(args.depth),
             str(args.batch)]
    procs = [subprocess.Popen(host.command(words[:4] + ["--node-rank", str(rank)] + words[4:]), env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank, host in enumerate(hosts)]
    outputs = [proc.communicate(timeout=args.timeout) for proc in procs]
    if any(proc.returncode != 0 for proc in procs):
        raise RuntimeError(f"{strategy} failed:\n" + "\n".join(o[1][-3000:] for o in outputs))
    return json.loads(out.read_text())


def measure(args: argparse.Namespace, rate: str, work: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.netns import two_hosts

    runs: dict[str, list[dict]] = {strategy: [] for strategy in args.strategies}
    with two_hosts(rate=rate) as hosts:
        for repeat in range(args.repeats):
            order = args.strategies if repeat % 2 == 0 else list(reversed(args.strategies))
            for strategy in order:
                result = two_nodes(args, hosts, strategy, work / f"{rate}-{strategy}-{repeat}.json")
                runs[strategy].append(result)
                print(f"  {rate} {strategy:<5} repeat {repeat + 1}: {result['samples_per_s']:.1f} samples/s, "
                      f"{result['link_bytes_per_step'] / 1e6:.1f} MB/step on the link", flush=True)
    return runs


def table(rate: str, runs: dict[str, list[dict]]) -> str:
    medians = {s: statistics.median(r["samples_per_s"] for r in rs) for s, rs in runs.items()}
    lines = [f"{rate}: {next(iter(runs.values()))[0]['parameters'] / 1e6:.1f} M parameters, 2 nodes × 2 processes",
             "| strategy | samples/s (median, range) | MB across the link per step | vs fsdp |", "|---|---|---|---|"]
    for strategy, results in runs.items():
        speeds = [r["samples_per_s"] for r in results]
        link = statistics.median(r["link_bytes_per_step"] for r in results) / 1e6
        versus = f"{medians[strategy] / medians['fsdp']:.2f}×" if "fsdp" in medians else "—"
        lines.append(f"| {strategy} | {medians[strategy]:.1f} ({min(speeds):.1f}–{max(speeds):.1f}) | {link:.1f} | {versus} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="100mbit,1gbit", help="tc rates, comma-separated")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per run (after 2 warm-up steps)")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8, help="rows per process per step")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", help="write every run's figures here")
    args = parser.parse_args()
    args.strategies = args.strategies.split(",")
    found = {}
    with tempfile.TemporaryDirectory(prefix="hsdp-link-") as work:
        for rate in args.rates.split(","):
            found[rate] = measure(args, rate, Path(work))
            print(table(rate, found[rate]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        strategy, out, steps, width, depth, batch = sys.argv[2:8]
        worker(strategy, out, int(steps), int(width), int(depth), int(batch))
    else:
        sys.exit(main())
