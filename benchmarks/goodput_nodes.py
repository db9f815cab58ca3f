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
    python benchmarks/goodput_nodes.py --mtbf 60 --soak-steps 32000 --seed 2 --configs auto,background,foreground --warm-workers --nnodes 2 --reference-alongside
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from goodput import LoadSampler, _env, _kill_group, accounted, reference_run, soak_table  # noqa: E402
from tests.netns import Host, two_hosts  # noqa: E402

KINDS = ("kill-worker", "power-off", "sigterm")
PORT = 29000 + random.randrange(900)  # inside the namespaces: no other job listens there
GUARD_S = 600  # a job that makes no progress for this long is a hang: the soak stops and says so


def node_command(rank: int, master: str, out: Path, steps: int, flags: list[str], nnodes: str = "1:2",
                 last_call: int = 2) -> list[str]:
    """One node's ``paratrain train``: the same words on both hosts but the node rank. ``nnodes`` a range
    (``1:2``): a dynamic rendezvous that waits ``last_call`` seconds for a node still coming; ``2``: every
    rendezvous waits for both nodes (up to ``--rdzv-timeout``)."""
    rendezvous = ["--rdzv-last-call", str(last_call)] if ":" in nnodes else []
    return [sys.executable, "-m", "paratrain", "train", "digits", "--nnodes", nnodes, "--node-rank", str(rank),
            "--master-addr", master, "--master-port", str(PORT), "--nproc-per-node", "1",
            "--rdzv-timeout", "120", *rendezvous, "--stall-timeout", "30",
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

    def __init__(self, hosts: tuple[Host, Host], out: Path, steps: int, flags: list[str], log: Path,
                 nnodes: str = "1:2", last_call: int = 2):
        self.hosts, self.out, self.log = hosts, out, log
        self.commands = [node_command(rank, hosts[0].address, out, steps, flags, nnodes, last_call) for rank in range(2)]
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
    injected: list[list] = []  # [time, kind] of each fault, for reading the ledger's attempts against them
    start = time.time()
    load = LoadSampler()
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
                injected.append([time.time(), kind])
                with open(job.log, "a") as console:
                    console.write(f"--- {time.strftime('%H:%M:%S')} fault: {kind}\n")
                next_fault = time.time() + rng.expovariate(1 / mtbf)
            now_size = sum(path.stat().st_size for path in (ledger_file, job.out / "metrics.jsonl") if path.is_file())
            if now_size != size:
                progress_at, size = time.time(), now_size
            elif time.time() - progress_at > GUARD_S:
                raise SystemExit(f"{name}: neither the ledger nor metrics.jsonl grew for {GUARD_S} s: a hang (see {job.log})")
            load.sample()
            time.sleep(0.05)
    finally:
        job.stop()
    return {"name": name, "outside": time.time() - start, "launches": job.launches, "faults": faults,
            "load": load.summary(), "injected": injected}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mtbf", type=float, default=60.0)
    parser.add_argument("--soak-steps", type=int, default=12000)
    parser.add_argument("--fixed", type=int, default=360)
    parser.add_argument("--configs", default="background,auto", help="comma-separated, run in this order: foreground "
                        "(every --fixed steps, --no-background-save), background (every --fixed steps), auto "
                        "(--save-every auto --mtbf)")
    parser.add_argument("--warm-workers", action="store_true", help="every configuration with --warm-workers (a pool "
                        "per node: a restart of the workers forks them instead of importing torch)")
    parser.add_argument("--nnodes", default="1:2", help="the nodes' --nnodes: a range (1:2, a dynamic rendezvous with "
                        "--last-call) or 2 (every rendezvous waits for both nodes)")
    parser.add_argument("--last-call", type=int, default=2, help="--rdzv-last-call of a node range, in seconds")
    parser.add_argument("--reference", default=None, help="the uninterrupted run's folder; one of --soak-steps steps "
                        "already there is used (made earlier, e.g. with --configs ''), else it is run there first")
    parser.add_argument("--reference-alongside", action="store_true", help="run the uninterrupted run beside the first "
                        "configuration, on two hosts of its own, instead of before the soak (it shares the machine)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", default=None, help="a folder to keep the runs in (default: a temporary one)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    warm = ["--warm-workers"] if args.warm_workers else []
    suffix = ", warm workers" if args.warm_workers else ""
    configs = {"foreground": (f"foreground, every {args.fixed}{suffix}",
                              ["--save-every", str(args.fixed), "--no-background-save", *warm]),
               "background": (f"background, every {args.fixed}{suffix}", ["--save-every", str(args.fixed), *warm]),
               "auto": (f"background, auto{suffix}", ["--save-every", "auto", "--mtbf", str(args.mtbf), *warm])}
    keys = [key for key in args.configs.split(",") if key]
    unknown = [key for key in keys if key not in configs]
    if unknown:
        raise SystemExit(f"--configs {','.join(unknown)}: not a configuration; choose from {', '.join(configs)}")
    chosen = [configs[key] for key in keys]
    if args.reference_alongside and not chosen:
        raise SystemExit("--reference-alongside runs the uninterrupted run beside the first configuration: name one in --configs")
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="paratrain-goodput-nodes-"))
        hosts = stack.enter_context(two_hosts())
        workdir = Path(args.keep or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        reference = Path(args.reference).resolve() if args.reference else workdir / "reference"

        def run_reference(on: tuple[Host, Host]) -> None:
            job = Job(on, reference, args.soak_steps, [], reference.with_suffix(".log"), args.nnodes, args.last_call)
            soak("reference", job, float("inf"), random.Random(0), reference / "checkpoints" / "goodput.jsonl")

        alongside = None
        if args.reference_alongside:  # on two hosts of its own: the faults of the soak's hosts never reach it
            other = stack.enter_context(two_hosts())
            alongside = threading.Thread(target=run_reference, args=(other,), daemon=True)
            alongside.start()
        else:
            ideal = reference_run(reference, args.soak_steps, lambda: run_reference(hosts))
            print(f"reference: {args.soak_steps} steps uninterrupted in {ideal:.0f} s (its ledger), {reference}", flush=True)
        rows = []
        for index, (name, flags) in enumerate(chosen):
            out = workdir / f"soak-{index}"
            job = Job(hosts, out, args.soak_steps, flags, workdir / f"soak-{index}.log", args.nnodes, args.last_call)
            result = soak(name, job, args.mtbf, random.Random(args.seed), out / "checkpoints" / "goodput.jsonl")
            if alongside is not None:
                alongside.join(timeout=3600)
                ideal = reference_run(reference, args.soak_steps, lambda: None)
                print(f"reference (beside {chosen[0][0]}, on two hosts of its own): {args.soak_steps} steps uninterrupted "
                      f"in {ideal:.0f} s (its ledger), {reference}", flush=True)
                alongside = None
            rows.append(accounted(result, out, reference, workdir / f"soak-{index}.png", f"two nodes, {name}"))
    lines = [f"## goodput soak on two simulated nodes: digits, 1 process per node (--nnodes {args.nnodes}"
             + (f", --rdzv-last-call {args.last_call}" if ":" in args.nnodes else "") + f"), {args.soak_steps} steps, "
             f"failures every {args.mtbf:.0f} s on average (seed {args.seed}); the same job without failures took "
             f"{ideal:.0f} s (its ledger)", "", *soak_table(rows)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
