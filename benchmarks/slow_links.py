"""Two "PCs" on a slow LAN: samples/s and dev accuracy per gradient compression mode.

Builds two network namespaces joined by a veth pair whose ends ``tc`` limits to each
rate (``tests/netns.py``), runs ``paratrain train TASK`` as two ``--nnodes 2`` nodes,
one process each, and a one-node baseline (one process, same batch per process) in
the same measurement, repetitions alternating between the cases so that load from
other jobs on the machine spreads over all of them. Then, for the dev accuracy,
trains each mode on two nodes for the same number of samples (accuracy does not
depend on the link's speed, only on the compression) and evaluates on the dev set.

Needs root and iproute2. Run from the repository root::

    python3 benchmarks/slow_links.py                              # 1gbit and 100mbit, text-cls
    python3 benchmarks/slow_links.py --rates 100mbit --modes none,auto --repeats 3
    python3 benchmarks/slow_links.py --delay 1ms                  # needs the netem qdisc
    python3 benchmarks/slow_links.py --accuracy-steps 0           # throughput only

Prints one table per rate — samples/s; the ratio to one node, of the medians and
*paired* (the median over repetitions of each run against the one-node run of the same
repetition); the share of ``two-apart``, two unconnected one-node runs at once, which is
what two nodes can reach on this machine at best; what ``auto`` chose — and one accuracy
table, with the load average before and after; ``--json FILE`` keeps it all.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.netns import Host, NetnsUnavailable, two_hosts  # noqa: E402

PORT = 29531
AUTO_CHOICE = re.compile(r"grad_compression auto → (\S+?):")
LINK_LINE = re.compile(r"link between the \d+ nodes: (.+)")
REPORT_LINE = re.compile(r"gradient communication \(.+")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "TORCHELASTIC", "GLOO_", "NCCL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMP_NUM_THREADS"] = "1"  # what torchrun gives each worker; the one-node baseline gets the same
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _train_words(args: argparse.Namespace, out: Path, steps: int, limit_eval: int | None) -> list[str]:
    words = [sys.executable, "-m", "paratrain", "train", args.task, "--max-steps", str(steps),
             "--batch-size", str(args.batch_size), "--out", str(out), "--fresh", "--no-tensorboard",
             "--no-progress", "--log-every", str(max(steps, 1)), "--no-eval-per-epoch", "--keep-last", "1"]
    if limit_eval:
        words += ["--limit-eval", str(limit_eval)]
    return words


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def one_node(args: argparse.Namespace, host: Host, out: Path, steps: int, limit_eval: int | None) -> dict:
    """One process on one node (in-process training, 1 thread)."""
    done = subprocess.run(host.command(_train_words(args, out, steps, limit_eval)), env=_env(),
                          capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise RuntimeError(f"one-node run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {"summary": _summary(out)}


def two_apart(args: argparse.Namespace, hosts: tuple[Host, Host], out: Path, steps: int) -> dict:
    """This machine's ceiling for two nodes: two one-node runs at once, one in each namespace, not
    connected. On two real PCs the sum is twice one node; here both processes share two cores (and
    their caches and memory bandwidth), which costs them speed before any gradient crosses a link."""
    _run_both(args, [host.command(_train_words(args, out / name, steps, 64)) for name, host in zip("ab", hosts)],
              "a two-apart run")
    return {"summary": {"samples_per_s": sum(_summary(out / name)["samples_per_s"] for name in "ab")}}


def _run_both(args: argparse.Namespace, commands: list[list[str]], what: str) -> list[tuple[str, str]]:
    """Start both commands, wait for both (all killed after --timeout); (stdout, stderr) of each."""
    procs = [subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for command in commands]
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=args.timeout))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
    if any(proc.returncode != 0 for proc in procs):
        raise RuntimeError(f"{what} failed:\n" + "\n".join(o[0][-2000:] + o[1][-3000:] for o in outputs))
    return outputs


def two_nodes(args: argparse.Namespace, hosts: tuple[Host, Host], out: Path, mode: str, steps: int,
              limit_eval: int | None) -> dict:
    """``paratrain train`` on node 0 and node 1 (``--nnodes 2``), one process each."""
    words = _train_words(args, out, steps, limit_eval) + [
        "--grad-compression", mode, "--nnodes", "2", "--nproc-per-node", "1",
        "--master-addr", hosts[0].address, "--master-port", str(PORT)]
    # Both nodes write to one directory (the namespaces share this machine's disk), as every rank of a
    # job must: the fit loop's setup check refuses ranks with different options. The old run goes first,
    # not through --fresh, so the two launchers never race to move it aside.
    shutil.rmtree(out, ignore_errors=True)
    words.remove("--fresh")
    outputs = _run_both(args, [host.command(words + ["--node-rank", str(rank)]) for rank, host in enumerate(hosts)],
                        "two-node run")
    text = outputs[0][0] + outputs[0][1]
    found = {name: pattern.search(text) for name, pattern in
             (("auto", AUTO_CHOICE), ("link", LINK_LINE), ("report", REPORT_LINE))}
    return {
        "summary": _summary(out),
        **{name: (match.group(1) if name != "report" else match.group(0)) if match else None
           for name, match in found.items()},
    }


def throughput(args: argparse.Namespace, rate: str, work: Path) -> dict:
    """Samples/s of the one-node baseline and of each mode on two nodes, repetitions alternating."""
    cases = ["one-node", *(["two-apart"] if args.ceiling else []), *args.modes]
    samples: dict[str, list[float]] = {case: [] for case in cases}
    notes: dict[str, dict] = {}
    with two_hosts(rate=rate, delay=args.delay) as hosts:
        for repeat in range(args.repeats):
            order = cases if repeat % 2 == 0 else list(reversed(cases))
            for case in order:
                out = work / f"{rate}-{case.replace(':', '_')}"
                if case == "one-node":
                    # Twice the steps of a two-node run: the same number of samples.
                    result = one_node(args, hosts[0], out, 2 * args.steps, 64)
                elif case == "two-apart":
                    # Each as many steps as the one-node run: the same batches, so the same work per step.
                    result = two_apart(args, hosts, out, 2 * args.steps)
                else:
                    result = two_nodes(args, hosts, out, case, args.steps, 64)
                    notes[case] = {k: result[k] for k in ("auto", "link", "report")}
                samples[case].append(result["summary"]["samples_per_s"])
                print(f"  {rate} {case:<12} repeat {repeat + 1}: {samples[case][-1]:.1f} samples/s", flush=True)
    base = statistics.median(samples["one-node"])
    ceiling = statistics.median(samples["two-apart"]) if "two-apart" in samples else None
    # Against the one-node run of the same repetition, minutes apart at most: the machine's own
    # speed drifts by more than that over a whole run.
    paired = {case: statistics.median(v / b for v, b in zip(values, samples["one-node"]))
              for case, values in samples.items()}
    rows = {case: {"samples_per_s": values, "median": statistics.median(values),
                   "vs_one_node": statistics.median(values) / base, "paired": paired[case],
                   "of_ceiling": statistics.median(values) / ceiling if ceiling else None, **notes.get(case, {})}
            for case, values in samples.items()}
    return rows


def accuracy(args: argparse.Namespace, work: Path) -> dict:
    """Dev accuracy after ``--accuracy-steps`` two-node steps (same samples for every mode)."""
    modes = [m for m in args.modes if m != "auto"] or ["none"]
    found = {}
    with two_hosts() as hosts:
        for mode in modes:
            out = work / f"accuracy-{mode.replace(':', '_')}"
            result = two_nodes(args, hosts, out, mode, args.accuracy_steps, None)
            found[mode] = result["summary"]["last_metrics"]["accuracy"]
            print(f"  accuracy {mode:<12}: {found[mode]:.4f}", flush=True)
    return found


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="text-cls")
    parser.add_argument("--rates", default="1gbit,100mbit", help="tc rates, comma-separated")
    parser.add_argument("--delay", default=None, help="added one-way delay per end, e.g. 1ms (needs netem)")
    parser.add_argument("--modes", default="none,bf16,fp16,powersgd:4,auto")
    parser.add_argument("--steps", type=int, default=60, help="two-node steps per throughput run")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--accuracy-steps", type=int, default=400, help="two-node steps of the accuracy runs (0: skip)")
    parser.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                        help="skip the two-apart case (two unconnected one-node runs at once: this machine's ceiling)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the namespaces are deleted on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{started}  load average {_load()}  command: {' '.join(sys.argv)}", flush=True)
    results: dict = {"date": started, "command": " ".join(sys.argv), "load_before": _load(), "rates": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="paratrain-slow-links-") as tmp:
            for rate in args.rates.split(","):
                results["rates"][rate] = throughput(args, rate, Path(tmp))
            if args.accuracy_steps:
                results["accuracy"] = accuracy(args, Path(tmp))
    except NetnsUnavailable as exc:
        print(f"slow_links: cannot build the two hosts here: {exc}", file=sys.stderr)
        return 2
    results["load_after"] = _load()
    print(f"\nload average before {results['load_before']}, after {results['load_after']}")
    for rate, rows in results["rates"].items():
        print(f"\n{args.task}, 2 nodes x 1 process, batch {args.batch_size}/process, link {rate}"
              f"{' + ' + args.delay + ' delay' if args.delay else ''}, {args.steps} steps ({args.repeats} alternating repeats)")
        print(f"{'case':<12} {'samples/s (median)':>19} {'vs one node':>12} {'paired':>7} {'of two-apart':>13}  runs / notes")
        for case, row in rows.items():
            runs = ", ".join(f"{v:.0f}" for v in row["samples_per_s"])
            chose = f"  auto chose {row['auto']}" if row.get("auto") else ""
            ceiling = f"{row['of_ceiling']:>13.2f}" if row.get("of_ceiling") else f"{'':>13}"
            print(f"{case:<12} {row['median']:>19.1f} {row['vs_one_node']:>11.2f}x {row['paired']:>6.2f}x {ceiling}  [{runs}]{chose}")
        link = next((row.get("link") for row in rows.values() if row.get("link")), None)
        if link:
            print(f"measured link: {link}")
        for case, row in rows.items():
            if row.get("report"):
                print(f"{case}: {row['report']}")
    if "accuracy" in results:
        budget = args.accuracy_steps * 2 * args.batch_size
        print(f"\ndev accuracy after {args.accuracy_steps} two-node steps ({budget} samples):")
        for mode, value in results["accuracy"].items():
            print(f"{mode:<12} {value:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
