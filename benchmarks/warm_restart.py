"""A worker restart, cold against warm (``paratrain run --warm-workers``): the kill → first step done of the next
attempt, and the attempt's start-up by the run's own goodput ledger.

Each job is ``paratrain train digits`` on 2 processes (batches of 2, a save every 50 steps) with
``--max-restarts --restarts``; once an attempt has trained (its ledger says so) and ``--train`` seconds more, rank 1's
worker — the process torch's agent started — is SIGKILLed, and the agent restarts the group, which resumes from the
newest checkpoint. After the last restart's first step the job gets SIGTERM (it saves and exits). Cold and warm jobs
alternate (``--rounds`` of each). Per restart:

* ``kill → first step``: the SIGKILL (this script's clock) to the next attempt's first step done (its ledger:
  ``origin`` + ``startup``, the same ``time.time()`` clock);
* ``start-up``: the ledger's ``startup`` of that attempt — from the process torch's agent started (a warm worker
  counts from there too, not from the fork) to its first step;
* ``recovery``: the ledger's gap from the failed attempt's last record to the next one's origin.

Medians over all restarts of a mode, and warm / cold ratios, measured in this one run; the load average before and
after.

    python benchmarks/warm_restart.py --restarts 5
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
WAIT_S = 600  # a guard against a hung job, not a limit on what is measured


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARATRAIN_", "TORCHELASTIC_", "PET_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _records(out: Path) -> list[dict]:
    from paratrain.goodput.ledger import LEDGER_FILE, read_records

    return read_records(out / "checkpoints" / LEDGER_FILE)


def _stepped(out: Path, attempt: int) -> bool:
    return any(r.get("event") == "ledger" and r.get("attempt") == attempt and (r.get("seconds") or {}).get("train")
               for r in _records(out))


def agents_worker(launcher: int, rank: int) -> psutil.Process | None:
    """Rank ``rank``'s worker: the process torch's agent (in the launcher ``launcher``) started; None before it."""
    for process in psutil.Process(launcher).children():
        try:
            if "paratrain.cli.workers.train" in " ".join(process.cmdline()) and process.environ().get("RANK") == str(rank):
                return process
        except psutil.Error:
            continue
    return None


def job(out: Path, warm: bool, restarts: int, train_s: float) -> list[dict]:
    command = [sys.executable, "-m", "paratrain", "train", "digits", "--nproc-per-node", "2", "--batch-size", "2",
               "--max-steps", "1000000", "--save-every", "50", "--max-restarts", str(restarts), "--no-eval-per-epoch",
               "--log-every", "100000", "--no-tensorboard", "--no-progress", "--out", str(out),
               *(["--warm-workers"] if warm else [])]
    log = open(out.with_suffix(".log"), "w")  # noqa: SIM115
    launcher = subprocess.Popen(command, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    kills: dict[int, float] = {}
    try:
        for attempt in range(1, restarts + 2):
            deadline = time.monotonic() + WAIT_S
            while not _stepped(out, attempt):
                if launcher.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the {'warm' if warm else 'cold'} job ended or hung in attempt {attempt}; "
                                     f"see {out.with_suffix('.log')}")
                time.sleep(0.05)
            if attempt > restarts:
                break
            time.sleep(train_s)
            worker = agents_worker(launcher.pid, 1)
            if worker is None:
                raise SystemExit(f"no worker of rank 1 in attempt {attempt}; see {out.with_suffix('.log')}")
            kills[attempt + 1] = time.time()
            worker.kill()
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=WAIT_S)
    finally:
        try:
            os.killpg(launcher.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
    from paratrain.goodput import accounting

    run = accounting.account(_records(out))
    rows = []
    for attempt in run.attempts:
        if attempt.number in kills:
            first_step = attempt.origin + attempt.seconds.get("startup", 0.0)
            rows.append({"kill_to_step": first_step - kills[attempt.number], "startup": attempt.seconds.get("startup", 0.0),
                         "recovery": attempt.seconds.get("recovery", 0.0)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=5, help="restarts per job (default 5)")
    parser.add_argument("--rounds", type=int, default=1, help="jobs per mode, alternating (default 1)")
    parser.add_argument("--train", type=float, default=2.0, help="seconds an attempt trains before the kill")
    args = parser.parse_args()
    sys.path.insert(0, str(SRC))
    load_before = os.getloadavg()
    results: dict[str, list[dict]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="warm-restart-") as folder:
        for index in range(args.rounds):
            for mode in ("cold", "warm") if index % 2 == 0 else ("warm", "cold"):
                rows = job(Path(folder) / f"{mode}-{index}", mode == "warm", args.restarts, args.train)
                results[mode] += rows
                print(f"{mode} job {index + 1}: " + ", ".join(f"{r['kill_to_step']:.2f} s" for r in rows), flush=True)
    load_after = os.getloadavg()
    print(f"\n## a worker's restart, cold vs --warm-workers: digits, 2 processes, {args.restarts} restarts × "
          f"{args.rounds} job(s) per mode; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
          f"({os.cpu_count()} CPUs)\n")
    print("| median over the restarts | cold | warm | warm / cold |")
    print("|---|---|---|---|")
    for key, title in (("kill_to_step", "SIGKILL → next attempt's first step"),
                       ("startup", "start-up (ledger: worker start → first step)"),
                       ("recovery", "recovery (ledger: last record → worker start)")):
        cold = statistics.median(r[key] for r in results["cold"])
        warm = statistics.median(r[key] for r in results["warm"])
        print(f"| {title} | {cold:.2f} s | {warm:.2f} s | {warm / cold:.2f} |")


if __name__ == "__main__":
    main()
