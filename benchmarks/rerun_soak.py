"""The rerun contract, soaked: interrupt ``paratrain train`` again and again, rerun the same command
after each fault, and check that the job ends exactly as an uninterrupted run.

Faults, each followed by the same command (argv unchanged):

* ``early-crash``    SIGKILL of one worker before the first checkpoint exists (OOM killer, lost node)
* ``kill-first-save``the whole job SIGKILLed while its first checkpoint is being written
* ``kill-worker``    SIGKILL of one worker mid-run
* ``kill-group``     SIGKILL of the whole process group (launcher and workers)
* ``kill-in-save``   the whole job SIGKILLed while a later checkpoint is being written
* ``sigterm``        SIGTERM to the launcher (a batch system's preemption): save, exit 75
* ``sigint``         Ctrl-C: SIGINT to the whole process group: save, exit 130

A save is caught mid-write with the ``PARATRAIN_TEST_PAUSE_IN_SAVE`` hook (the data files are
written, the checkpoint is not yet complete). After every attempt: no process of the job is
left. At the end: the final weights equal those of an uninterrupted run bit for bit, no
temporary checkpoint directory is left, and ``metrics.jsonl`` numbers every attempt.

    python benchmarks/rerun_soak.py --faults 50 --seed 1     # random kinds and timing, replayable

``tests/loop/test_rerun_soak.py`` runs the seven kinds once each in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

KINDS = ("early-crash", "kill-first-save", "kill-worker", "kill-group", "kill-in-save", "sigterm", "sigint")
NEEDS_NO_CHECKPOINT = {"early-crash", "kill-first-save"}  # only meaningful before the first checkpoint
PAUSE_ENV = "PARATRAIN_TEST_PAUSE_IN_SAVE"
WAIT_S = 180  # the longest any one attempt may take to reach its fault or its end


@dataclass
class SoakResult:
    faults: Counter = field(default_factory=Counter)
    landed: Counter = field(default_factory=Counter)  # faults that ended their run (non-zero exit)
    attempts: int = 0
    exit_codes: Counter = field(default_factory=Counter)
    identical: bool = False
    orphans: list[str] = field(default_factory=list)
    temporaries: list[str] = field(default_factory=list)
    attempt_records: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.faults.items()))
        missed = sum(self.faults.values()) - sum(self.landed.values())
        return [
            f"faults: {sum(self.faults.values())} ({kinds}); {missed} came after their run had ended",
            f"runs of the command: {self.attempts} (exit codes {dict(sorted(self.exit_codes.items()))})",
            f"final weights bit-identical to an uninterrupted run: {'yes' if self.identical else 'NO'}",
            f"orphan processes: {len(self.orphans)}; temporary checkpoint directories left: {len(self.temporaries)}",
            f"attempts numbered in metrics.jsonl: {self.attempt_records[:3]}…{self.attempt_records[-1:]} "
            f"({len(self.attempt_records)} records)",
            f"time: {self.seconds:.0f} s",
        ]


class Soak:
    """One run directory, one command, many faults. ``steps`` optimizer steps of ``digits`` on 2 processes."""

    def __init__(self, workdir: Path, steps: int = 900, save_every: int = 30, env: dict[str, str] | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.steps, self.save_every = steps, save_every
        self.env = dict(env if env is not None else os.environ)
        self.env.setdefault("OMP_NUM_THREADS", "1")
        self.result = SoakResult()

    def command(self, out: Path) -> list[str]:
        return [sys.executable, "-m", "paratrain", "train", "digits", "--nproc-per-node", "2", "--max-steps",
                str(self.steps), "--save-every", str(self.save_every), "--keep-last", "2", "--log-every", "5",
                "--no-tensorboard", "--no-progress", "--out", str(out)]

    # ---- one attempt -------------------------------------------------------------------------
    def _start(self, out: Path, pause_step: int | None = None) -> subprocess.Popen:
        env = dict(self.env)
        env.pop(PAUSE_ENV, None)
        if pause_step is not None:
            env[PAUSE_ENV] = f"300@{pause_step}"
        log = self.workdir / f"{out.name}-attempt-{self.result.attempts + 1}.log"  # what the console showed
        with open(log, "w") as console:
            return subprocess.Popen(self.command(out), env=env, stdout=console, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def _wait_for(self, process: subprocess.Popen, ready, what: str) -> bool:
        """Poll ``ready()`` until true (True) or the job ends first (False)."""
        deadline = time.monotonic() + WAIT_S
        while not ready():
            if process.poll() is not None:
                return False
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {WAIT_S}s")
            time.sleep(0.02)
        return True

    def _finish(self, process: subprocess.Popen, out: Path) -> int:
        try:
            code = process.wait(timeout=WAIT_S)
        finally:
            _kill_group(process.pid)
        self.result.attempts += 1
        self.result.exit_codes[code] += 1
        self._check_orphans(out)
        return code

    def _check_orphans(self, out: Path) -> None:
        deadline = time.monotonic() + 30  # workers of a killed launcher die with it (PR_SET_PDEATHSIG)
        while True:
            alive = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])
                     if str(out) in " ".join(p.info["cmdline"] or [])]
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.result.orphans += alive
        for line in alive:
            print(f"orphan: {line}", file=sys.stderr)

    def fault(self, out: Path, kind: str, rng: random.Random) -> None:
        """Start the command, inject ``kind`` at a random moment (seeded), wait for the end."""
        last = _last_checkpoint_step(out)
        seen = _metrics_size(out)  # this attempt's records come after the earlier attempts' ones
        if kind in ("kill-first-save", "kill-in-save"):
            pause = (last // self.save_every + 1 + (kind == "kill-in-save")) * self.save_every
            process = self._start(out, pause_step=min(pause, self.steps))
            if self._wait_for(process, lambda: _paused(out), "pause in a save"):
                _kill_group(process.pid)
        else:
            process = self._start(out)
            if kind == "early-crash":
                ready = lambda: (out / "logs" / "rank1.log").exists()  # noqa: E731 - the workers run
            else:
                target = last + rng.randint(1, 3 * self.save_every)
                ready = lambda: _progress(out, seen) >= target  # noqa: E731
            if self._wait_for(process, ready, f"{kind} moment"):
                time.sleep(rng.uniform(0, 0.3))
                _inject(process, kind)
        code = self._finish(process, out)
        self.result.faults[kind] += 1
        self.result.landed[kind] += code != 0

    def complete(self, out: Path) -> int:
        """The same command once more, to its end."""
        return self._finish(self._start(out), out)

    # ---- the whole soak ------------------------------------------------------------------------
    def run(self, kinds: list[str], seed: int = 0) -> SoakResult:
        begin = time.monotonic()
        rng = random.Random(seed)
        reference, soaked = self.workdir / "uninterrupted", self.workdir / "soaked"
        if self.complete(reference) != 0:
            raise RuntimeError("the uninterrupted run failed")
        self.result = SoakResult()  # count the soaked runs only
        for kind in kinds:
            self.fault(soaked, kind, rng)
        code = self.complete(soaked)
        if code != 0:
            raise RuntimeError(f"the final run of the soaked directory exited {code}")
        self.result.identical = _final_weights(reference) == _final_weights(soaked)
        self.result.temporaries = [p.name for p in (soaked / "checkpoints").iterdir() if ".tmp-" in p.name]
        self.result.attempt_records = [r["attempt"] for r in _records(soaked) if r["event"] == "attempt"]
        self.result.seconds = time.monotonic() - begin
        return self.result


def plan(faults: int, rng: random.Random) -> list[str]:
    """``faults`` kinds: the two start-up faults first (they need an empty directory), then random."""
    if faults <= len(NEEDS_NO_CHECKPOINT):
        return list(sorted(NEEDS_NO_CHECKPOINT))[:faults]
    rest = [k for k in KINDS if k not in NEEDS_NO_CHECKPOINT]
    return ["early-crash", "kill-first-save", *(rng.choice(rest) for _ in range(faults - 2))]


# ---- reading the run directory ------------------------------------------------------------------
def _metrics_size(out: Path) -> int:
    try:
        return (out / "metrics.jsonl").stat().st_size
    except OSError:
        return 0


def _records(out: Path, offset: int = 0) -> list[dict]:
    """The records of ``metrics.jsonl`` from byte ``offset`` on."""
    try:
        with open(out / "metrics.jsonl", "rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            pass  # a line cut by a kill
    return records


def _progress(out: Path, offset: int) -> int:
    """The last training step logged after byte ``offset`` of ``metrics.jsonl`` (by the running attempt)."""
    steps = [r["step"] for r in _records(out, offset) if r.get("event") == "train"]
    return max(steps, default=0)


def _last_checkpoint_step(out: Path) -> int:
    from paratrain.checkpoint import catalog

    saved = catalog.complete(out / "checkpoints")
    return saved[-1][1].step if saved else 0


def _paused(out: Path) -> bool:
    """A save is between its data files and its completion (the pause hook holds it there)."""
    root = out / "checkpoints"
    return root.is_dir() and any(".tmp-" in p.name and (p / "rng.pt").exists() for p in root.iterdir())


def _final_weights(out: Path) -> bytes:
    from paratrain.checkpoint import catalog

    path, _ = catalog.complete(out / "checkpoints")[-1]
    return (path / "model.safetensors").read_bytes()


def _inject(process: subprocess.Popen, kind: str) -> None:
    if kind in ("early-crash", "kill-worker"):
        workers = [p for p in psutil.Process(process.pid).children(recursive=True)
                   if "paratrain.cli.workers.train" in " ".join(p.cmdline())]
        if workers:
            random.choice(workers).kill()
    elif kind == "kill-group":
        _kill_group(process.pid)
    elif kind == "sigterm":
        process.send_signal(signal.SIGTERM)
    elif kind == "sigint":
        os.killpg(process.pid, signal.SIGINT)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=6000, help="long enough that every fault lands before the end")
    parser.add_argument("--dir", default=None, help="where the two runs go (default: a temporary folder)")
    args = parser.parse_args()
    kinds = plan(args.faults, random.Random(args.seed))
    with tempfile.TemporaryDirectory(prefix="rerun-soak-") as scratch:
        soak = Soak(Path(args.dir or scratch), steps=args.steps)
        result = soak.run(kinds, seed=args.seed)
    print(f"rerun soak, seed {args.seed}, {args.steps} steps of digits on 2 processes:")
    for line in result.lines():
        print("  " + line)
    ok = result.identical and not result.orphans and not result.temporaries
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
