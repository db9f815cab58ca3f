"""Goodput under failures: per-step fault tolerance (ft-ddp) against today's elastic restart.

Both modes train the same job (tests/strategy/ft_workers.py's model and data, one seeded order, a
global batch of 8 split over 3 processes, a checkpoint every 10 steps, ``--step-sleep`` seconds of
stand-in compute per step) for ``--duration`` seconds, while a process picked at random is killed
with SIGKILL at Poisson times (exponential gaps, mean ``--mean`` seconds):

* ``ft``: ``paratrain run --fault-tolerance replicas --replica-groups 3`` (3 groups of 1, ft-ddp);
  the survivors go on, the killed group is started again and heals;
* ``elastic``: ``paratrain run --nproc-per-node 3 --max-restarts 1000`` with ddp; torch's agent
  stops the other two and restarts all three, which resume from the last checkpoint.

Printed per mode: the distinct committed steps (a step trained again after a restart counts once);
goodput, those steps per second over the mode's own steps per second in a run of ``--baseline``
seconds without failures (the effective training time is goodput × wall time); the median interval
between distinct steps; and the time from each kill to the next *new* committed step.

    python benchmarks/ft_goodput.py                       # Poisson mean 60 s, 15 minutes per mode
    python benchmarks/ft_goodput.py --mean 30 --duration 180 --baseline 60   # the quick run
    python benchmarks/ft_goodput.py --mean 1e9 --duration 40 --baseline 5 --step-sleep 0   # per-step cost

``--nodes netns`` runs each job on two nodes instead: two network namespaces joined by a veth pair
(tests/netns.py; needs root and iproute2), 2 processes per node, 4 in all. ``ft``: one launcher per node
against node 0's Lighthouse, one replica group of 2 processes per node (a kill restarts its group, which heals
across the pair); ``elastic``: ``paratrain run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d
--master-addr NODE0 --max-restarts 1000`` on each node (a kill restarts every process of both nodes from the last checkpoint).

    sudo python benchmarks/ft_goodput.py --nodes netns --mean 20 --duration 45 --baseline 15   # the short trial

With ``--modes ft`` it also prints each kill's terms (docs/fault-tolerance.md, "The pause after a kill"): when a
survivor dropped the step in flight, when the quorum without the dead group came, the step after it; how many
live groups left a quorum in the run without kills; and the worst delay of a thread waking from a sleep here (the
margin the Lighthouse's heartbeat timeout keeps over one interval):

    python benchmarks/ft_goodput.py --modes ft --mean 15 --duration 150 --baseline 20              # 5 kills land
    sudo python benchmarks/ft_goodput.py --modes ft --nodes netns --mean 20 --duration 150 --baseline 20 --victims 2,3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from tests.strategy import ft_workers  # noqa: E402
from tests.support import clean_env, paratrain_cmd  # noqa: E402

PROCESSES = 3
PER_NODE = 2  # with --nodes netns: processes per node (2 nodes)
START_GUARD_S = 180.0  # a guard: the first step of a job comes within seconds


def elastic_worker(out: Path) -> None:
    """One rank of the elastic job: the same model, order and global batch as ft_workers, on ddp."""
    import torch
    import torch.nn.functional as F

    import paratrain as pt
    from paratrain.data.committed_slices import CommittedSlices

    rt = pt.Runtime(strategy="ddp", seed=ft_workers.SEED)
    (out / f"pid-{rt.rank}").write_text(str(os.getpid()))
    net = ft_workers.model()
    optimizer = torch.optim.SGD(net.parameters(), lr=ft_workers.LR)
    net, optimizer = rt.setup(net, optimizer)
    rows = ft_workers.Rows()
    slices = CommittedSlices(len(rows), ft_workers.GLOBAL, seed=ft_workers.SEED)
    ckpt = pt.Checkpointer(rt, out / "ckpt", model=net, optimizer=optimizer, data=slices, keep_last=2)
    state = ckpt.resume()
    step = state.step if state is not None else 0
    pause = float(os.environ.get("FT_STEP_SLEEP", "0"))
    log = open(out / "steps-0.jsonl", "a") if rt.rank == 0 else None
    while True:
        while not slices.epoch_done:
            ids, weight = slices.part(rt.rank, rt.world_size)
            loss = F.binary_cross_entropy_with_logits(net(rows.x[ids]), rows.y[ids]) * weight
            rt.backward(loss)
            rt.step(optimizer)
            slices.commit()
            step += 1
            if log:
                log.write(json.dumps({"pid": os.getpid(), "step": step, "time": time.time()}) + "\n")
                log.flush()
            if step % ft_workers.SAVE_EVERY == 0:
                ckpt.save(step=step)
            time.sleep(pause)
        slices.next_epoch()


def start(mode: str, out: Path, step_sleep: float, hosts=None) -> list[subprocess.Popen]:
    """The job's launchers: one on this machine, or one per node of ``hosts`` (tests/netns.py's two)."""
    env = clean_env(FT_STEP_SLEEP=str(step_sleep), FT_EPOCHS="100000")
    worker = [str(ROOT / "tests/strategy/ft_workers.py"), str(out)] if mode == "ft" else [__file__, "--worker", str(out)]
    if hosts is None:
        if mode == "ft":
            flags = ["--fault-tolerance", "replicas", "--replica-groups", str(PROCESSES), "--replica-restarts",
                     "1000", "--nproc-per-node", "1"]
        else:
            flags = ["--nproc-per-node", str(PROCESSES), "--max-restarts", "1000"]
        commands = [([], flags)]
    else:
        master = hosts[0].address
        commands = []
        for rank, host in enumerate(hosts):
            if mode == "ft":  # one replica group of PER_NODE processes per node, against node 0's Lighthouse
                flags = ["--fault-tolerance", "replicas", "--replica-groups", "1", "--replica-restarts", "1000",
                         "--nnodes", "2", "--node-rank", str(rank), "--master-addr", master, "--master-port",
                         "29500", "--nproc-per-node", str(PER_NODE)]
            else:  # c10d (node 0 hosts its store): after a failure both nodes' agents meet again, restart every worker
                flags = ["--nnodes", "2", "--node-rank", str(rank), "--rdzv-backend", "c10d", "--master-addr", master,
                         "--master-port", "29400", "--nproc-per-node", str(PER_NODE), "--max-restarts", "1000"]
            commands.append((host.command([]), flags))
    jobs = []
    for rank, (prefix, flags) in enumerate(commands):
        log = open(out / ("job.log" if len(commands) == 1 else f"job-{rank}.log"), "w")
        jobs.append(subprocess.Popen([*prefix, *paratrain_cmd("run", *flags, *worker)], env=env, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True))
    return jobs


def pid_file(mode: str, victim: int, hosts) -> str:
    """The pid file of process ``victim``: ft_workers names group rank ``r`` of group ``g`` ``pid-g.r`` (``pid-g``
    for rank 0); the elastic worker names its global rank."""
    if mode == "ft" and hosts is not None:
        group, rank = divmod(victim, PER_NODE)
        return f"pid-{group}" + (f".{rank}" if rank else "")
    return f"pid-{victim}"


def commits(out: Path) -> list[tuple[int, float]]:
    """(step, time) of every commit, from every group's log (ft) or rank 0's (elastic), by time."""
    found = []
    for path in out.glob("steps-*.jsonl"):
        for line in path.read_text().splitlines():
            if line.endswith("}"):
                record = json.loads(line)
                found.append((record["step"], record["time"]))
    return sorted(found, key=lambda pair: pair[1])


def records(out: Path, stem: str) -> list[dict]:
    """Every record of ``OUT/<stem>-*.jsonl`` (ft_workers' committed steps, ``steps``, or dropped ones, ``drops``)."""
    return [json.loads(line) for path in out.glob(f"{stem}-*.jsonl")
            for line in path.read_text().splitlines() if line.endswith("}")]


def kill_terms(out: Path, kills: list[float]) -> list[dict]:
    """For each kill of an ft job, its pause and the pause's terms, from the groups' logs. ``pause_s``: to the
    first new committed step whose quorum came after the kill (a step in flight may still commit just after it:
    the pause is the wait for the next quorum, which drops the dead group); ``dropped_s``, to the first step a
    group dropped before it (its all-reduce with the dead group failed and the vote said no; None when no step was
    in flight); ``quorum_s``, to that step's quorum (the Lighthouse dropped the dead group); ``step_s``, that step
    from its quorum to its commit. ``survivor``: that step was committed by a process that had committed before
    the kill (False: every other group was down or still starting then, and the step came from a restarted one;
    no survivor to bound)."""
    steps, drops, seen, new = sorted(records(out, "steps"), key=lambda r: r["time"]), records(out, "drops"), set(), []
    for record in steps:  # the first commit of each step (a step trained again after a restart counts once)
        if record["step"] not in seen:
            seen.add(record["step"])
            new.append(record)
    terms = []
    for kill in kills:
        first = next((r for r in new if r["began"] > kill), None)
        until = first["time"] if first is not None else float("inf")
        dropped = min((r["time"] for r in drops if kill < r["time"] < until), default=None)
        terms.append({"pause_s": None if first is None else first["time"] - kill,
                      "dropped_s": None if dropped is None else dropped - kill,
                      "quorum_s": None if first is None else first["began"] - kill,
                      "step_s": None if first is None else first["time"] - first["began"],
                      "survivor": first is not None and any(r["pid"] == first["pid"] and r["time"] < kill
                                                            for r in steps)})
    return terms


def left_quorum_lines(out: Path) -> int:
    """The survivors' lines naming a group that left the quorum (in a run without kills: a live group dropped)."""
    return sum(path.read_text(errors="replace").count("left the quorum") for path in out.glob("job*.log"))


class Stalls:
    """The worst lateness of a thread that sleeps ``period`` s in a loop, while the job runs: how long this machine
    left a ready thread unscheduled (the margin a heartbeat timeout needs over its interval)."""

    def __init__(self, period: float = 0.05):
        import threading

        self.period, self.worst, self._done = period, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            before = time.monotonic()
            time.sleep(self.period)
            self.worst = max(self.worst, time.monotonic() - before - self.period)

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self.worst


def _stop_all(jobs: list[subprocess.Popen]) -> None:
    for job in jobs:
        _stop(job)


def _stop(job: subprocess.Popen) -> None:
    """End the job's whole process group (launcher, agents, workers)."""
    try:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def kill_schedule(duration: float, mean: float, seed: int, processes: int = PROCESSES,
                  victims: list[int] | None = None) -> list[tuple[float, int]]:
    """(seconds after the first committed step, process) of every kill: exponential gaps of mean ``mean``, each
    process drawn from ``victims`` (default: all ``processes``); the same schedule for both modes."""
    rng, schedule, at = random.Random(seed), [], 0.0
    victims = victims if victims is not None else list(range(processes))
    while True:
        at += rng.expovariate(1 / mean)
        if at >= duration:
            return schedule
        schedule.append((at, rng.choice(victims)))


def run_mode(mode: str, duration: float, schedule: list[tuple[float, int]], step_sleep: float, hosts=None) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"ft-goodput-{mode}-"))
    jobs = start(mode, out, step_sleep, hosts)

    def running() -> bool:
        return all(job.poll() is None for job in jobs)

    try:
        waited = time.monotonic() + START_GUARD_S
        while not commits(out) and running():  # the clock starts at the first committed step
            if time.monotonic() > waited:
                raise SystemExit(f"{mode}: no step committed within {START_GUARD_S:g} s of the start; see {out}/job*.log")
            time.sleep(0.1)
        began, stalls = time.time(), Stalls()
        kills, skipped, pending = [], 0, list(schedule)
        while time.time() < began + duration and running():
            if pending and time.time() >= began + pending[0][0]:
                _, victim = pending.pop(0)
                try:
                    pid = int((out / pid_file(mode, victim, hosts)).read_text())
                    os.kill(pid, signal.SIGKILL)
                    kills.append(time.time())
                except (OSError, ValueError):
                    skipped += 1  # that process is down already (restarting): nothing to kill
            time.sleep(0.05)
        ended, ended_early, worst_stall = time.time(), not running(), stalls.stop()
    finally:  # also when this benchmark is interrupted: the job runs in a session of its own, nothing else ends it
        _stop_all(jobs)
    seen, distinct, new_at = set(), 0, []
    for step, at in commits(out):
        if began <= at <= ended and step not in seen:
            distinct += 1
            new_at.append(at)
        seen.add(step)
    gaps = [b - a for a, b in zip(new_at, new_at[1:])]  # between distinct steps: the undisturbed pace is the median
    step_s = statistics.median(gaps) if gaps else float("nan")
    latencies = [next((at for at in new_at if at > kill), ended) - kill for kill in kills]
    return {"mode": mode, "wall_s": ended - began, "kills": len(kills), "skipped_kills": skipped,
            "distinct_steps": distinct, "median_step_s": step_s,
            "kill_to_next_new_step_s": latencies, "ended_early": ended_early, "out": str(out),
            "kill_times": kills, "kill_terms": kill_terms(out, kills) if mode == "ft" else [],
            "left_quorum_lines": left_quorum_lines(out),
            "worst_stall_s": worst_stall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=900.0, help="seconds of training per mode")
    parser.add_argument("--mean", type=float, default=60.0, help="mean seconds between kills (Poisson)")
    parser.add_argument("--baseline", type=float, default=120.0,
                        help="seconds of each mode without failures first (its steps per second)")
    parser.add_argument("--step-sleep", type=float, default=0.2, help="stand-in compute seconds per step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--victims", help="the processes the kills pick from, e.g. 2,3 (node 1's with --nodes netns; "
                        "default: every process)")
    parser.add_argument("--modes", default="ft,elastic")
    parser.add_argument("--nodes", choices=["one", "netns"], default="one",
                        help="one: this machine; netns: two network namespaces, 2 processes each (needs root)")
    parser.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return elastic_worker(Path(args.worker))
    # A SIGTERM (a timeout) unwinds like Ctrl-C: the jobs are stopped and the namespaces deleted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.nodes == "netns":
        from tests import netns

        with netns.two_hosts() as hosts:
            return measure(args, list(hosts))
    return measure(args, None)


def measure(args: argparse.Namespace, hosts) -> None:
    results = []
    victims = [int(v) for v in args.victims.split(",")] if args.victims else None
    schedule = kill_schedule(args.duration, args.mean, args.seed, PROCESSES if hosts is None else 2 * PER_NODE, victims)
    where = "this machine" if hosts is None else f"2 nodes ({hosts[0].address}, {hosts[1].address}) of {PER_NODE}"
    print(f"on {where}; kill schedule (s after the first step, process): "
          f"{[(round(at, 1), who) for at, who in schedule]}")
    for mode in args.modes.split(","):
        baseline = run_mode(mode, args.baseline, [], args.step_sleep, hosts)  # the same job, nothing killed
        result = run_mode(mode, args.duration, schedule, args.step_sleep, hosts)
        result["steps_per_s_without_failures"] = baseline["distinct_steps"] / baseline["wall_s"]
        result["baseline_left_quorum_lines"] = baseline["left_quorum_lines"]
        result["baseline_worst_stall_s"] = baseline["worst_stall_s"]
        result["goodput"] = result["distinct_steps"] / result["wall_s"] / result["steps_per_s_without_failures"]
        results.append(result)
        lat = result["kill_to_next_new_step_s"]
        print(f"{mode:8s} wall {result['wall_s']:.0f} s, {result['kills']} kills ({result['skipped_kills']} found the "
              f"process down), {result['distinct_steps']} distinct "
              f"steps ({result['steps_per_s_without_failures']:.2f}/s without failures), goodput "
              f"{result['goodput']:.2f} (effective {result['goodput'] * result['wall_s']:.0f} s of "
              f"{result['wall_s']:.0f}); kill → next new step: median "
              f"{statistics.median(lat) if lat else float('nan'):.1f} s, max {max(lat) if lat else float('nan'):.1f} s"
              + ("; A LAUNCHER ENDED BEFORE THE END (see its job log)" if result["ended_early"] else ""),
              flush=True)
        print(f"{'':8s} without kills: {baseline['left_quorum_lines']} live group(s) dropped from a quorum; worst "
              f"scheduling stall {max(baseline['worst_stall_s'], result['worst_stall_s']) * 1000:.0f} ms", flush=True)
        survived = [t for t in result["kill_terms"] if t["survivor"]]
        if result["kill_terms"]:
            print(f"{'':8s} {len(survived)} of {len(lat)} kills left a survivor (a group that had committed before "
                  "the kill committed the first step quorumed after it); over those:", flush=True)
        for name in ("pause_s", "dropped_s", "quorum_s", "step_s"):
            values = [t[name] for t in survived if t[name] is not None]
            if values:
                print(f"{'':8s}   kill → {name[:-2]}: median {statistics.median(values):.2f} s, max "
                      f"{max(values):.2f} s ({len(values)} kills)", flush=True)
    if len(results) == 2 and results[1]["distinct_steps"]:
        print(f"ft / elastic distinct steps in the same wall time: "
              f"{results[0]['distinct_steps'] / results[1]['distinct_steps']:.2f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
