"""Goodput on two simulated nodes: the fault soak of ``benchmarks/goodput.py --part soak`` with the job's two
processes on two hosts (network namespaces joined by a veth pair, ``tests/netns.py``; needs root).

Each host runs ``paratrain train digits --nnodes 1:2 --node-rank R --nproc-per-node 1`` against host 0's
address, as a scheduler would: a node whose command ended without success is started again with the same
command, and the job is done when a node's command succeeds. Failures come at exponential gaps of mean
``--mtbf`` seconds, one of:

- ``kill-worker``: a worker on either host is SIGKILLed (its agent restarts the group; both nodes rendezvous again);
- ``power-off``: a host dies — its link goes down first (no goodbye packet), then every process in it is
  SIGKILLed; the link comes back and its command is started again (host 0 takes the rendezvous store with it:
  the other node's job fails too and is started again);
- ``sigterm``: both launchers get SIGTERM (a preemption: a save, exit 75), and both commands are started again.

Per configuration (``--configs``, as in goodput.py: background saves every ``--fixed`` steps, ``auto``): the
outside clock, the ledger's wall time and categories, goodput by the ledger and by the outside clock, the
failures, and whether the final weights equal those of the same two-node job run without failures, bit for bit.

    python benchmarks/goodput_nodes.py --mtbf 60 --soak-steps 12000 --seed 1
    python benchmarks/goodput_nodes.py --mtbf 20 --soak-steps 1500 --fixed 200 --configs background  # a short trial
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from goodput import _env, _kill_group, accounted, soak_table  # noqa: E402
from tests.netns import Host, two_hosts  # noqa: E402

KINDS = ("kill-worker", "power-off", "sigterm")
PORT = 29000 + random.randrange(900)  # inside the namespaces: no other job listens there
GUARD_S = 600  # a job that makes no progress for this long is a hang: the soak stops and says so


def node_command(rank: int, master: str, out: Path, steps: int, flags: list[str]) -> list[str]:
    """One node's ``paratrain train``: the same words on both hosts but the node rank."""
    return [sys.executable, "-m", "paratrain", "train", "digits", "--nnodes", "1:2", "--node-rank", str(rank),
            "--master-addr", master, "--master-port", str(PORT), "--nproc-per-node", "1",
            "--rdzv-timeout", "120", "--rdzv-last-call", "2", "--stall-timeout", "30",
            "--max-steps", str(steps), "--batch-size", "2", "--max-restarts", "1000", "--no-eval-per-epoch",
            "--log-every", "500", "--keep-last", "2", "--no-tensorboard", "--no-progress", "--out", str(out), *flags]


def _pids(host: Host) -> list[int]:
    listed = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout
    return [int(pid) for pid in listed.split()]


def _workers(host: Host) -> list[int]:
    found = []
    for pid in _pids(host):
        with contextlib.suppress(OSError):
            if b"paratrain.cli.workers.train" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def _power_off(host: Host) -> None:
    subprocess.run(["ip", "-n", host.namespace, "link", "set", host.interface, "down"], check=True)
    for pid in _pids(host):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _power_on(host: Host) -> None:
    subprocess.run(["ip", "-n", host.namespace, "link", "set", host.interface, "up"], check=True)


class Job:
    """The two nodes' commands, started again as a scheduler would until one succeeds."""

    def __init__(self, hosts: tuple[Host, Host], out: Path, steps: int, flags: list[str], log: Path):
        self.hosts, self.out, self.log = hosts, out, log
        self.commands = [node_command(rank, hosts[0].address, out, steps, flags) for rank in range(2)]
        self.nodes: list[subprocess.Popen | None] = [None, None]
        self.launches = 0

    def start(self, rank: int) -> None:
        with open(self.log, "a") as console:
            console.write(f"--- {time.strftime('%H:%M:%S')} node {rank} starts\n")
            console.flush()
            self.nodes[rank] = subprocess.Popen(self.hosts[rank].command(self.commands[rank]), env=_env(),
                                                stdout=console, stderr=subprocess.STDOUT, start_new_session=True)
        self.launches += 1

    def tend(self) -> bool:
        """Start again every node whose command failed; True once one succeeded (the other is then ended)."""
        codes = [node.poll() if node is not None else 1 for node in self.nodes]
        if 0 in codes:
            for node in self.nodes:
                if node is not None and node.poll() is None:
                    try:  # it finishes the same job: give it its own time to see the end
                        node.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        _kill_group(node.pid)
            return True
        for rank, code in enumerate(codes):
            if code is not None:
                self.start(rank)
        return False

    def stop(self) -> None:
        for node in self.nodes:
            if node is not None:
                _kill_group(node.pid)
        for host in self.hosts:
            for pid in _pids(host):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def soak(name: str, job: Job, mtbf: float, rng: random.Random, ledger_file: Path) -> dict:
    """Run ``job`` until it succeeds, injecting faults at exponential gaps once its ledger exists; the outside clock."""
    faults: dict[str, int] = {}
    start = time.time()
    next_fault = float("inf")
    progress_at, size = time.time(), -1
    try:
        while not job.tend():
            if mtbf != float("inf") and next_fault == float("inf") and ledger_file.is_file():
                next_fault = time.time() + rng.expovariate(1 / mtbf)
            if time.time() >= next_fault:
                kind = rng.choice(KINDS)
                if kind == "kill-worker":
                    workers = [pid for host in job.hosts for pid in _workers(host)]
                    if not workers:
                        next_fault = time.time() + 0.5
                        continue
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(rng.choice(workers), signal.SIGKILL)
                elif kind == "power-off":
                    rank = rng.randrange(2)
                    _power_off(job.hosts[rank])
                    job.nodes[rank].wait()
                    _power_on(job.hosts[rank])
                else:
                    for node in job.nodes:
                        if node is not None and node.poll() is None:
                            node.send_signal(signal.SIGTERM)
                faults[kind] = faults.get(kind, 0) + 1
                next_fault = time.time() + rng.expovariate(1 / mtbf)
            now_size = sum(path.stat().st_size for path in (ledger_file, job.out / "metrics.jsonl") if path.is_file())
            if now_size != size:
                progress_at, size = time.time(), now_size
            elif time.time() - progress_at > GUARD_S:
                raise SystemExit(f"{name}: neither the ledger nor metrics.jsonl grew for {GUARD_S} s: a hang (see {job.log})")
            time.sleep(0.05)
    finally:
        job.stop()
    return {"name": name, "outside": time.time() - start, "launches": job.launches, "faults": faults}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mtbf", type=float, default=60.0)
    parser.add_argument("--soak-steps", type=int, default=12000)
    parser.add_argument("--fixed", type=int, default=360)
    parser.add_argument("--configs", default="background,auto", help="comma-separated: background (every --fixed "
                        "steps), auto (--save-every auto --mtbf)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", default=None, help="a folder to keep the runs in (default: a temporary one)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    configs = {"background": (f"background, every {args.fixed}", ["--save-every", str(args.fixed)]),
               "auto": ("background, auto", ["--save-every", "auto", "--mtbf", str(args.mtbf)])}
    chosen = [configs[key] for key in args.configs.split(",")]
    with tempfile.TemporaryDirectory(prefix="paratrain-goodput-nodes-") as scratch, two_hosts() as hosts:
        workdir = Path(args.keep or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        reference = Job(hosts, workdir / "reference", args.soak_steps, [], workdir / "reference.log")
        started = time.time()
        soak("reference", reference, float("inf"), random.Random(0), workdir / "reference" / "checkpoints" / "goodput.jsonl")
        ideal = time.time() - started
        rows = []
        for index, (name, flags) in enumerate(chosen):
            out = workdir / f"soak-{index}"
            job = Job(hosts, out, args.soak_steps, flags, workdir / f"soak-{index}.log")
            result = soak(name, job, args.mtbf, random.Random(args.seed), out / "checkpoints" / "goodput.jsonl")
            rows.append(accounted(result, out, workdir / "reference", workdir / f"soak-{index}.png", f"two nodes, {name}"))
    lines = [f"## goodput soak on two simulated nodes: digits, 1 process per node, {args.soak_steps} steps, failures "
             f"every {args.mtbf:.0f} s on average (seed {args.seed}); the same job without failures took {ideal:.0f} s",
             "", *soak_table(rows)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
