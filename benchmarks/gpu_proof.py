"""The GPU proof: one command that checks every CUDA path paratrain takes and measures its speed on one GPU.

    bash benchmarks/gpu_proof.sh OUTDIR                      # on a machine with one CUDA GPU, no network needed
    bash benchmarks/gpu_proof.sh OUTDIR --device cpu --smoke # the same parts on the CPU, tiny (the test suite's run)

It writes three files into OUTDIR, rewritten after every check so that they hold what is known
even if the run is cut short: ``proof.log`` (every command and its output), ``proof.json`` (every
check and every figure) and ``proof.md`` (the tables). It stops itself before ``--time-limit``
(540 s): Part A gets until ``--part-a-limit`` (240 s), Part B the rest; a check that would start too
late is recorded as "not run: out of time", and the files are still written. The exit code is 1
when a check failed, else 0.

Part A, correctness, in this order (the cheapest distinct proofs first, so that a short budget
cuts the repeated ones):

    versions           device, driver, torch, CUDA, NCCL, cuDNN, the peers
    digits cpu         ``paratrain train digits`` on the CPU: the reference accuracy
    digits fp32 | bf16-mixed | fp16-mixed | compile | ddp-nccl
                       the same command on the GPU (ddp: ``--strategy ddp --nproc-per-node 1 --backend
                       nccl`` through the launcher; one process makes no process group, so DDP itself
                       runs in the own loop); each accuracy within ACCURACY_TOLERANCE of the reference
    kill -9 and rerun  the fp16-mixed command (on the CPU: fp32) SIGKILLed after its first checkpoint,
                       then run again: its final weights must equal the uninterrupted run's bit for
                       bit (when they differ, a second uninterrupted run tells a resume bug from
                       kernels that are not deterministic)
    own loop           pt.Runtime(strategy="ddp") in a group of one the script made (NCCL on CUDA) +
                       rt.loader (pinned memory on CUDA) + rt.backward/rt.step
    readme script      the README's complete script (the ``+`` side of its diff), unchanged, run as
                       ``python train.py``: it must train 3 epochs on the device, then, run again,
                       find the run finished and train nothing
    doctor             ``paratrain doctor --json``, and its GPU self-test findings as a row of their own
    pytest -m gpu      ``pytest -m gpu -n0 tests/gpu`` (the doctor's test left out: the doctor row runs it)

Part B, speed: ``benchmarks/gpu_bert.py`` at batch 32 and 256 (paratrain, paratrain-compile,
paratrain-fit, hf-trainer, accelerate, fabric, raw-compiled; samples/s and MFU, medians of
alternating rounds, as many rounds as the time left allows), and the ratios the goals are
stated in (docs/gpu.md).

Smoke mode (``--device cpu --smoke``) runs every part on the CPU with tiny sizes; the rows that
only mean something on a GPU (or that cost the CPU too much: fp16, compile) are present as
"skipped: no CUDA".
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OK, FAILED, NO_CUDA, NOT_INSTALLED, OUT_OF_TIME = (
    "ok", "failed", "skipped: no CUDA", "skipped: not installed", "not run: out of time")
# A GPU run differs from the CPU run by float rounding (cuDNN kernels, TF32, autocast), which moves
# the trajectory as another seed would. Six seeds of the CPU run (6 epochs, 359 test images) reached
# 0.9805-0.9861, 2 images apart; 0.015 is 5 images, 2.7 times that spread, while a broken path
# (no update, a scaler that skips every step, a wrong dtype) ends far below it.
ACCURACY_TOLERANCE = 0.015
PRECISIONS = {"fp32": ["--precision", "32-true"], "bf16-mixed": ["--precision", "bf16-mixed"],
              "fp16-mixed": ["--precision", "fp16-mixed"], "compile": ["--compile"],
              "ddp-nccl": ["--strategy", "ddp", "--nproc-per-node", "1", "--backend", "nccl"]}
SAVE_EVERY, KILL_AFTER = 100, 150  # the killed run has a checkpoint at step 100 and dies at step 150 or later
BERT_METHODS = ("paratrain", "paratrain-compile", "paratrain-fit", "hf-trainer", "accelerate", "fabric", "raw-compiled")
BERT_BATCHES = (32, 256)
# Dense bf16 peak TFLOP/s by card (NVIDIA's data sheets), for MFU; first match of the device name wins.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("A100", 312.0))
# Seconds each check may take at most (the part's deadline may cut it shorter).
BUDGET = {"versions": 30, "digits": 90, "digits compile": 150, "digits ddp-nccl": 120, "kill": 150,
          "own loop": 60, "readme script": 120, "doctor": 150, "pytest": 240}


@dataclass
class Check:
    """One row: what was checked, how it ended, the figures it measured."""

    part: str
    name: str
    status: str = OUT_OF_TIME
    detail: str = ""
    seconds: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)


def a_rows() -> list[str]:
    return ["versions", "digits cpu", *(f"digits {name}" for name in PRECISIONS), "kill -9 and rerun",
            "own loop", "readme script", "doctor", "doctor gpu self-test", "pytest -m gpu"]


def b_rows() -> list[str]:
    return [f"bert batch {batch} {method}" for batch in BERT_BATCHES for method in BERT_METHODS]


class Proof:
    """The rows, the clock and the three files."""

    def __init__(self, out: Path, cuda: bool, smoke: bool, time_limit: float, part_a_limit: float):
        self.out, self.cuda, self.smoke = out, cuda, smoke
        self.start = time.monotonic()
        self.end = self.start + time_limit
        self.part_a_end = min(self.start + part_a_limit, self.end)
        self.checks = {name: Check("A", name) for name in a_rows()} | {name: Check("B", name) for name in b_rows()}
        self.facts: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                      "mode": "smoke (CPU, tiny sizes)" if smoke else "full",
                                      "time_limit_s": time_limit, "part_a_limit_s": part_a_limit}
        self.goals = goals(self)  # every goal has its row from the start, without a value until Part B ran
        self.work = Path(tempfile.mkdtemp(prefix="gpu-proof-"))  # run directories: not OUTDIR's eight files
        out.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "proof.log", "w", buffering=1)

    # ---- time ---------------------------------------------------------------------------------
    def left(self, part: str) -> float:
        return (self.part_a_end if part == "A" else self.end) - time.monotonic()

    def budget(self, part: str, seconds: float) -> tuple[float, bool]:
        """(timeout for a check, whether the part's deadline rather than the check's own budget sets it)."""
        left = self.left(part)
        return (left, True) if left < seconds else (seconds, False)

    # ---- rows ---------------------------------------------------------------------------------
    def set(self, name: str, status: str, detail: str = "", **figures: Any) -> None:
        check = self.checks[name]
        check.status, check.detail = status, detail
        check.figures.update(figures)
        self.say(f"[{check.part}] {name}: {status}{' - ' + detail if detail else ''}")
        self.write()

    def run_check(self, name: str, body, *args) -> None:
        """``body(*args)`` sets the row(s); an exception in it fails the row instead of the proof."""
        if self.left(self.checks[name].part) < 1:
            return  # stays "not run: out of time"
        begin = time.monotonic()
        try:
            body(*args)
        except Exception as error:  # noqa: BLE001 - a broken check is a failed row, the others still run
            import traceback

            self.log.write(traceback.format_exc())
            self.set(name, FAILED, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        self.checks[name].seconds = round(time.monotonic() - begin, 1)
        self.write()

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.log.write(line + "\n")

    # ---- commands -----------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONUNBUFFERED"] = "1"
        if not self.cuda:
            env["PARATRAIN_DEVICE"] = "cpu"
        env.update(extra)
        if env.get("PARATRAIN_DEVICE") == "cpu":
            # The digits CNN is too small for more threads: on a busy 2-core machine, two threads took 10x longer.
            env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def command(self, argv: list[str], part: str, seconds: float, env: dict[str, str] | None = None,
                cwd: Path = ROOT) -> Outcome:
        """Run ``argv`` to its end or its timeout (then its whole process group is killed); output goes to the log."""
        timeout, by_deadline = self.budget(part, seconds)
        self.say(f"$ {' '.join(argv)}   (timeout {timeout:.0f} s)")
        begin = time.monotonic()
        with tempfile.TemporaryFile("w+") as output:
            process = subprocess.Popen(argv, cwd=cwd, env=env or self.env(), stdout=output, stderr=subprocess.STDOUT,
                                       text=True, start_new_session=True)
            try:
                code, timed_out = process.wait(timeout=max(timeout, 0.1)), False
            except subprocess.TimeoutExpired:
                kill_group(process.pid)
                code, timed_out = process.wait(), True
            output.seek(0)
            text = output.read()
        kill_group(process.pid)  # whatever it left behind
        self.log.write(text + ("" if text.endswith("\n") or not text else "\n"))
        seconds_taken = time.monotonic() - begin
        self.say(f"  exit {code} after {seconds_taken:.1f} s" + (" (timed out)" if timed_out else ""))
        return Outcome(code, text, seconds_taken, timed_out, by_deadline)

    # ---- the files ----------------------------------------------------------------------------
    def write(self) -> None:
        result = {**self.facts, "seconds": round(time.monotonic() - self.start, 1),
                  "tolerance": ACCURACY_TOLERANCE, "checks": [asdict(c) for c in self.checks.values()],
                  "goals": self.goals, "failed": self.failed()}
        write_atomically(self.out / "proof.json", json.dumps(result, indent=2, default=str))
        write_atomically(self.out / "proof.md", markdown(result))

    def failed(self) -> list[str]:
        return [c.name for c in self.checks.values() if c.status == FAILED]


@dataclass
class Outcome:
    code: int
    text: str
    seconds: float
    timed_out: bool
    by_deadline: bool

    def verdict(self, budget: float) -> tuple[str, str] | None:
        """(status, detail) when the command did not end by itself with exit 0."""
        if self.timed_out:
            if self.by_deadline:
                return OUT_OF_TIME, f"stopped after {self.seconds:.0f} s: the part's time ran out"
            return FAILED, f"took more than its {budget} s"
        if self.code != 0:
            return FAILED, f"exit {self.code}: {last_line(self.text)}"
        return None


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


# ---- Part A ------------------------------------------------------------------------------------
def check_versions(proof: Proof) -> None:
    import torch

    from paratrain.bench.machine import detect_machine

    machine = detect_machine()
    figures: dict[str, Any] = {"torch": torch.__version__, "python": machine.python, "platform": machine.platform,
                               "packages": machine.versions, "cpu": f"{machine.cpu_model} ({machine.cpu_cores} cores)"}
    if proof.cuda:
        if not torch.cuda.is_available():
            proof.set("versions", FAILED, "--device cuda: torch sees no CUDA device", **figures)
            return
        figures |= {"device": machine.gpu_model, "gpus": machine.gpu_count, "memory_gib": machine.gpu_memory_gib,
                    "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                    "driver": driver_version(), "cuda": machine.cuda, "nccl": machine.nccl,
                    "cudnn": torch.backends.cudnn.version(), "bf16": machine.bf16_supported}
        detail = (f"{figures['device']} (capability {figures['capability']}), driver {figures['driver']}, torch "
                  f"{torch.__version__}, CUDA {machine.cuda}, NCCL {machine.nccl}, cuDNN {figures['cudnn']}")
    else:
        figures |= {"device": "cpu", "cuda_build": torch.version.cuda}
        detail = f"CPU {figures['cpu']}, torch {torch.__version__} (no CUDA)"
    proof.facts["device"] = figures["device"]
    proof.set("versions", OK, detail, **figures)


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version (torch does not say it)."""
    try:
        return re.search(r"Kernel Module(?: for \S+)?\s+(\S+)", Path("/proc/driver/nvidia/version").read_text()).group(1)
    except (OSError, AttributeError):
        pass
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def digits_argv(out: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "paratrain", "train", "digits", "--out", str(out), "--save-every", str(SAVE_EVERY),
            "--log-every", "10", "--no-progress", "--no-tensorboard", *extra]


def final_accuracy(out: Path) -> float:
    return json.loads((out / "summary.json").read_text())["last_metrics"]["accuracy"]


def check_digits_reference(proof: Proof) -> None:
    """The CPU run every device run is compared with (in smoke mode the device run itself)."""
    out = proof.work / "digits-cpu"
    outcome = proof.command(digits_argv(out, PRECISIONS["fp32"]), "A", BUDGET["digits"],
                            env=proof.env(PARATRAIN_DEVICE="cpu"))
    if bad := outcome.verdict(BUDGET["digits"]):
        proof.set("digits cpu", *bad)
        return
    proof.facts["reference_accuracy"] = accuracy = final_accuracy(out)
    proof.set("digits cpu", OK, f"accuracy {accuracy:.4f} (the reference)", accuracy=accuracy)


def check_digits(proof: Proof, name: str) -> None:
    row = f"digits {name}"
    reference = proof.facts.get("reference_accuracy")
    if not proof.cuda and name != "fp32":
        why = {"bf16-mixed": "CUDA autocast (the CPU's is another path)",
               "fp16-mixed": "the fp16 GradScaler path is CUDA's (fp16 on the CPU is 10x slower)",
               "compile": "compiling on the CPU costs tens of seconds", "ddp-nccl": "NCCL needs CUDA"}[name]
        proof.set(row, NO_CUDA, why)
        return
    if proof.cuda:
        out = proof.work / f"digits-{name}"
        budget = BUDGET.get(row, BUDGET["digits"])
        outcome = proof.command(digits_argv(out, PRECISIONS[name]), "A", budget)
        if bad := outcome.verdict(budget):
            proof.set(row, *bad)
            return
        output = outcome.text
    else:  # the device is the CPU: its fp32 run is the reference run (compared with itself)
        out, output = proof.work / "digits-cpu", ""
    accuracy = final_accuracy(out)
    summary = json.loads((out / "summary.json").read_text())
    figures = {"accuracy": accuracy, "strategy": summary.get("strategy"), "precision": summary.get("precision"),
               "samples_per_s": summary.get("samples_per_s"), "world_size": summary.get("world_size")}
    if reference is None:
        proof.set(row, FAILED, f"accuracy {accuracy:.4f}; no CPU reference to compare with", **figures)
        return
    gap = accuracy - reference
    problems = [] if abs(gap) <= ACCURACY_TOLERANCE else ["outside the tolerance"]
    if name == "ddp-nccl":
        if (summary.get("strategy"), summary.get("world_size")) != ("ddp", 1):
            problems.append(f"ran {summary.get('strategy')} at world size {summary.get('world_size')}, not ddp at 1")
        figures["ddp_wrapped"] = "running the model unwrapped" not in output
        if not figures["ddp_wrapped"]:  # paratrain makes no group for one process; the own loop row runs DDP on NCCL
            figures["note"] = "one process under paratrain run: no process group, DDP unwrapped (own loop: DDP on NCCL)"
    proof.set(row, FAILED if problems else OK,
              f"accuracy {accuracy:.4f} vs CPU {reference:.4f} ({gap:+.4f}, tolerance {ACCURACY_TOLERANCE})"
              + "".join(f"; {p}" for p in problems) + (f"; {figures['note']}" if "note" in figures else ""),
              gap=gap, **figures)


def check_kill_and_rerun(proof: Proof) -> None:
    """SIGKILL a digits command after its first checkpoint, run it again; compare with its uninterrupted run.

    On the GPU the fp16-mixed command: its checkpoint must carry the GradScaler's state and the
    CUDA generator (dropout) for the rerun to end bit-identical. On the CPU the fp32 reference."""
    name = "kill -9 and rerun"
    precision = "fp16-mixed" if proof.cuda else "fp32"
    reference = proof.work / ("digits-fp16-mixed" if proof.cuda else "digits-cpu")
    if not (reference / "summary.json").exists():
        proof.set(name, FAILED, f"the uninterrupted run ({reference.name}) did not finish")
        return
    out = proof.work / "digits-killed"
    argv = digits_argv(out, PRECISIONS[precision])
    timeout, _ = proof.budget("A", BUDGET["kill"])
    deadline = time.monotonic() + timeout
    proof.say(f"$ {' '.join(argv)}   (SIGKILL once step {KILL_AFTER} is logged)")
    with open(proof.work / "killed-run.log", "w") as console:
        process = subprocess.Popen(argv, cwd=ROOT, env=proof.env(), stdout=console, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        step = 0
        while process.poll() is None and time.monotonic() < deadline:
            step = logged_step(out)
            if step >= KILL_AFTER:
                break
            time.sleep(0.01)
        kill_group(process.pid)
        code = process.wait()
    proof.log.write((proof.work / "killed-run.log").read_text())
    if code != -signal.SIGKILL or (out / "summary.json").exists():
        proof.set(name, FAILED, f"the kill did not land mid-run (exit {code}, last logged step {step})")
        return
    outcome = proof.command(argv, "A", max(deadline - time.monotonic(), 1))
    if bad := outcome.verdict(BUDGET["kill"]):
        proof.set(name, *bad)
        return
    resumed = json.loads((out / "summary.json").read_text()).get("resumed_from_step")
    same, detail = same_weights(reference, out)
    figures = {"precision": precision, "killed_at_step": step, "resumed_from_step": resumed, "identical": same}
    if same:
        proof.set(name, OK, f"{precision}: killed at step {step}, resumed from step {resumed}: final weights "
                  "bit-identical", **figures)
        return
    # Kernels that are not deterministic (cuDNN's, atomics) make two uninterrupted runs differ too.
    control = proof.work / "digits-control"
    again = proof.command(digits_argv(control, PRECISIONS[precision]), "A", max(deadline - time.monotonic(), 1))
    if again.verdict(BUDGET["kill"]) is None:
        control_same, control_detail = same_weights(reference, control)
        figures["uninterrupted_runs_identical"] = control_same
        detail += ("; two uninterrupted runs are identical, so the resume is at fault" if control_same else
                   f"; two uninterrupted runs differ too ({control_detail}): the kernels are not deterministic")
    proof.set(name, FAILED, f"{precision}: killed at step {step}, resumed from step {resumed}: {detail}", **figures)


def logged_step(out: Path) -> int:
    """The last training step in a run's metrics.jsonl (0 before it has one)."""
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    step = 0
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if record.get("event") == "train":
            step = max(step, int(record.get("step", 0)))
    return step


def same_weights(a: Path, b: Path) -> tuple[bool, str]:
    """Whether the last checkpoints' weight files of two runs are byte-identical; else the largest difference."""
    from safetensors.torch import load_file

    from paratrain.checkpoint import catalog

    files = [catalog.complete(run / "checkpoints")[-1][0] / "model.safetensors" for run in (a, b)]
    if files[0].read_bytes() == files[1].read_bytes():
        return True, "identical"
    first, second = (load_file(str(f)) for f in files)
    if first.keys() != second.keys():
        return False, "different tensor names"
    diff = max((first[k].double() - second[k].double()).abs().max().item() for k in first)
    return False, f"largest weight difference {diff:.3g}"


def check_own_loop(proof: Proof) -> None:
    """An own loop on pt.Runtime: rt.loader (batches on the device, copied from pinned host memory on
    CUDA; a batch handed on the host fails the check), rt.backward, rt.step, with
    ``strategy="ddp"`` inside a process group of one that the script made first (NCCL on CUDA).

    One process started by ``paratrain train`` or ``paratrain run`` makes no process group, so DDP
    stays unwrapped there (the ``digits ddp-nccl`` row); a group the user made is kept by pt.Runtime,
    so here DDP is built and its gradients go through NCCL, on the one GPU there is."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import TensorDataset

    import paratrain as pt

    if proof.cuda:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda", 0))
    else:
        os.environ["PARATRAIN_DEVICE"] = "cpu"  # pt.Runtime takes a visible GPU otherwise (runtime/device.py)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        rt = pt.Runtime(strategy="ddp", precision="bf16-mixed" if proof.cuda else "32-true", seed=0)
    except BaseException:
        dist.destroy_process_group()
        raise
    try:
        torch.manual_seed(0)
        features = torch.randn(512, 32)
        data = TensorDataset(features, (features[:, 0] > 0).long())
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
        model, optimizer = rt.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True))
        train = rt.loader(data, batch_size=64, shuffle=True)
        losses, pinned, delivered_on = [], set(), set()
        for _ in range(3):  # epochs: the loader reshuffles on each pass
            for xb, yb in train:
                delivered_on.add(xb.device.type)
                if xb.device != rt.device:  # rt.loader hands host batches: the loop moves them
                    pinned.add(xb.is_pinned())
                    xb, yb = xb.to(rt.device, non_blocking=True), yb.to(rt.device, non_blocking=True)
                with rt.autocast():
                    loss = torch.nn.functional.cross_entropy(model(xb), yb)
                rt.backward(loss)
                rt.step(optimizer)
                losses.append(loss.detach())
        values = [float(x) for x in torch.stack(losses).cpu()]
        wrapped = isinstance(model, torch.nn.parallel.DistributedDataParallel)
        figures = {"device": str(rt.device), "backend": dist.get_backend(), "ddp_wrapped": wrapped, "steps": len(values),
                   "first_loss": values[0], "last_loss": values[-1],
                   "loader_delivered_on": sorted(delivered_on), "host_batches_pinned": sorted(pinned)}
        problems = [] if wrapped else [f"rt.setup did not wrap the model in DDP ({type(model).__name__})"]
        if not values[-1] < 0.5 * values[0]:
            problems.append(f"the loss fell from {values[0]:.3f} to {values[-1]:.3f} only")
        if delivered_on != {rt.device.type}:  # rt.loader moves every batch to rt.device itself
            problems.append(f"rt.loader handed batches on {', '.join(sorted(delivered_on))}, not on {rt.device.type}")
        if rt.device.type == "cuda" and False in pinned:
            problems.append("rt.loader handed unpinned host batches on CUDA")
        where = ("on the device" if delivered_on == {rt.device.type} else
                 "on the host (pinned)" if pinned == {True} else "on the host")
        detail = (f"DDP on {dist.get_backend()}, {len(values)} steps on {rt.device}, loss {values[0]:.3f} -> "
                  f"{values[-1]:.3f}, batches came {where}")
        proof.set("own loop", FAILED if problems else OK, "; ".join(problems) or detail, **figures)
    finally:
        rt.close()
        dist.destroy_process_group()  # the script's own group: pt.Runtime leaves it to its maker
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


# The README's script, run unchanged; afterwards, whether torch put anything on the GPU.
README_RUNNER = ("import runpy, torch; runpy.run_path('train.py', run_name='__main__'); "
                 "print('cuda bytes', torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0)")


def readme_script() -> str:
    """The README's complete script: the context and ``+`` lines of its first diff block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = re.search(r"```diff\n(.*?)```", text, re.S).group(1).splitlines()
    return "".join(line[1:] + "\n" for line in lines if line[:1] in (" ", "+") or line == "")


def check_readme_script(proof: Proof) -> None:
    """The README's script as a user copies it: three epochs on the device, then a rerun that finds
    the run finished and trains nothing (the checkpoint it resumes was written on the GPU)."""
    name = "readme script"
    folder = proof.work / "readme"
    folder.mkdir()
    (folder / "train.py").write_text(readme_script(), encoding="utf-8")
    argv = [sys.executable, "-c", README_RUNNER]
    first = proof.command(argv, "A", BUDGET[name], cwd=folder)
    if bad := first.verdict(BUDGET[name]):
        proof.set(name, *bad)
        return
    epochs = re.findall(r"^epoch (\d) loss", first.text, re.M)
    used = int(re.search(r"^cuda bytes (\d+)", first.text, re.M).group(1))
    again = proof.command(argv, "A", BUDGET[name], cwd=folder)
    if bad := again.verdict(BUDGET[name]):
        proof.set(name, bad[0], f"the rerun: {bad[1]}")
        return
    problems = [] if epochs == ["0", "1", "2"] else [f"printed epochs {epochs}, not 0, 1, 2"]
    if proof.cuda and not used:
        problems.append("nothing was put on the GPU")
    if re.search(r"^epoch \d", again.text, re.M):
        problems.append("the rerun trained again instead of finding the run finished")
    figures = {"epochs": epochs, "cuda_bytes": used, "rerun_trained": bool(re.search(r"^epoch \d", again.text, re.M))}
    where = f"{used / 2**20:.1f} MiB on the GPU" if used else "on the CPU"
    proof.set(name, FAILED if problems else OK,
              "; ".join(problems) or f"3 epochs ({where}); the rerun found the run finished and trained nothing", **figures)


def check_doctor(proof: Proof) -> None:
    outcome = proof.command([sys.executable, "-m", "paratrain", "doctor", "--json"], "A", BUDGET["doctor"])
    try:
        report = json.loads(outcome.text[outcome.text.index("{"):])
    except ValueError:
        bad = outcome.verdict(BUDGET["doctor"]) or (FAILED, "no JSON report")
        proof.set("doctor", *bad)
        proof.set("doctor gpu self-test", *bad)
        return
    findings = report["findings"]
    problems = [f"{f['check']}: {f['detail']}" for f in findings if f["status"] == "problem"]
    proof.set("doctor", OK if report["ok"] and not problems else FAILED,
              "; ".join(problems) or f"{len(findings)} findings, no problem",
              findings={f["check"]: f"{f['status']}: {f['detail']}" for f in findings})
    self_test = [f for f in findings if f["check"].startswith("self-test:")]
    if not proof.cuda:
        proof.set("doctor gpu self-test", NO_CUDA, "the doctor runs it on a CUDA machine only")
    elif not self_test:
        proof.set("doctor gpu self-test", FAILED, "the doctor reported no self-test on this GPU")
    else:
        broken = [f"{f['check']}: {f['detail']}" for f in self_test if f["status"] == "problem"]
        proof.set("doctor gpu self-test", FAILED if broken else OK,
                  "; ".join(broken) or ", ".join(f"{f['check'][11:]} {f['status']}" for f in self_test),
                  findings={f["check"]: f"{f['status']}: {f['detail']}" for f in self_test})


def check_pytest_gpu(proof: Proof) -> None:
    name = "pytest -m gpu"
    if not proof.cuda:
        proof.set(name, NO_CUDA, "every test in tests/gpu needs a CUDA GPU (the suite collects them on every run)")
        return
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-n0", "-v", "-rfEs", "-p", "no:cacheprovider", "tests/gpu",
            "--ignore=tests/gpu/test_doctor.py"]  # the doctor row runs the same command
    outcome = proof.command(argv, "A", BUDGET["pytest"])
    # One line per test as it ends (-v), so a run cut short still says what passed.
    results = re.findall(r"^(tests/gpu/\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", outcome.text, flags=re.MULTILINE)
    counts: dict[str, int] = {}
    for _, result in results:
        counts[result.lower()] = counts.get(result.lower(), 0) + 1
    failing = sorted({test for test, result in results if result in ("FAILED", "ERROR")})
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or last_line(outcome.text)
    figures = {"counts": counts, "failing": failing, "tests": dict(results)}
    if outcome.timed_out:
        status, detail = outcome.verdict(BUDGET["pytest"])
        proof.set(name, status, f"{detail} ({summary})", **figures)
        return
    problems = [f"failing: {', '.join(failing)}"] if failing else []
    if outcome.code != 0 and not failing:
        problems.append(f"exit {outcome.code}: {last_line(outcome.text)}")
    if not counts.get("passed"):
        problems.append("no GPU test passed")  # all skipped: pytest does not see the GPU
    proof.set(name, FAILED if problems else OK, "; ".join([summary, *problems]), **figures)


# ---- Part B ------------------------------------------------------------------------------------
def check_bert(proof: Proof) -> None:
    """gpu_bert.py over both batch sizes in one process, told to start no measurement it cannot finish in time."""
    results = proof.work / "gpu_bert.json"
    margin = 45 if proof.cuda else 10  # the last measurement's overrun, the process's start and end
    limit = proof.left("B") - margin
    if limit < 10:
        return
    argv = [sys.executable, str(ROOT / "benchmarks" / "gpu_bert.py"), "--device", "cuda" if proof.cuda else "cpu",
            "--batch-sizes", *map(str, BERT_BATCHES), "--time-limit", f"{limit:.0f}", "--json", str(results)]
    methods = list(BERT_METHODS)
    if proof.smoke:
        argv += ["--tiny", "--steps", "1", "--warmup-steps", "1", "--rounds", "1"]
    else:
        argv += ["--steps", "30", "--warmup-steps", "5", "--rounds", "3"]
    if not proof.cuda:
        methods.remove("paratrain-compile")  # gpu_bert compiles only on CUDA unless told (minutes on the CPU)
        for batch in BERT_BATCHES:
            proof.set(f"bert batch {batch} paratrain-compile", NO_CUDA, "compiling BERT on the CPU takes minutes")
    argv += ["--methods", *methods]
    device = str(proof.facts.get("device"))
    peak = next((tflops for card, tflops in PEAK_BF16_TFLOPS if card in device), None)
    if peak:
        argv += ["--peak-tflops", f"{peak:g}"]
    elif proof.cuda:
        proof.say(f"no known bf16 peak for {device}: MFU is against gpu_bert.py's default (an H100 SXM's)")
    outcome = proof.command(argv, "B", limit + margin)
    if not results.exists():
        status, detail = outcome.verdict(limit + margin) or (FAILED, "gpu_bert.py wrote no results")
        for name in b_rows():
            if proof.checks[name].status == OUT_OF_TIME:
                proof.set(name, status, detail)
        return
    result = json.loads(results.read_text())
    proof.facts["bert"] = {k: v for k, v in result.items() if k not in ("rows", "machine")}
    status_of = {"ok": OK, "failed": FAILED, "not installed": NOT_INSTALLED, "not run: out of time": OUT_OF_TIME}
    on_cpu = not proof.cuda
    for row in result["rows"]:
        figures = {k: row[k] for k in ("samples_per_s", "mfu", "mfu_dense", "peak_gib", "rounds", "vs_hf_trainer")}
        if on_cpu:  # a CPU has no meaningful peak to divide by
            figures["mfu"] = figures["mfu_dense"] = None
        proof.set(f"bert batch {row['batch']} {row['method']}", status_of[row["status"]], row["note"], **figures)
    proof.goals = goals(proof)


def goals(proof: Proof) -> list[dict[str, Any]]:
    """The goals as ratios (reported, not passed or failed), for paratrain's loop as a user gets it
    (``paratrain``: its defaults) and with ``compile=True`` (``paratrain-compile``)."""
    def figure(batch: int, method: str, key: str = "samples_per_s") -> float | None:
        return proof.checks[f"bert batch {batch} {method}"].figures.get(key)

    found = []
    for own in ("paratrain", "paratrain-compile"):
        for batch in BERT_BATCHES:
            peers = [figure(batch, m) for m in ("paratrain-fit", "hf-trainer", "accelerate", "fabric", "raw-compiled")]
            found.append(goal(f"batch {batch}: {own} / the fastest peer", figure(batch, own),
                              max((r for r in peers if r), default=None), 1.0))
        found.append(goal(f"batch 32: {own} / hf-trainer", figure(32, own), figure(32, "hf-trainer"), 1.5))
        mfu = figure(256, own, "mfu")
        found.append({"goal": f"batch 256: {own} MFU", "value": mfu, "target": 0.35,
                      "met": None if mfu is None else mfu >= 0.35})
    for batch in BERT_BATCHES:
        found.append(goal(f"batch {batch}: paratrain-compile / raw-compiled", figure(batch, "paratrain-compile"),
                          figure(batch, "raw-compiled"), 0.97))
    return found


def goal(text: str, numerator: float | None, denominator: float | None, target: float) -> dict[str, Any]:
    value = numerator / denominator if numerator and denominator else None
    return {"goal": text, "value": value, "target": target, "met": None if value is None else value >= target}


# ---- the markdown ---------------------------------------------------------------------------------
def markdown(result: dict[str, Any]) -> str:
    lines = [f"# GPU proof, {result['date']}", "",
             f"Device: {result.get('device', '?')}; mode: {result['mode']}; {result['seconds']:.0f} s of "
             f"{result['time_limit_s']:.0f}; failed: {', '.join(result['failed']) or 'none'}.", "",
             "## Part A: correctness", "", "| check | status | detail | s |", "|---|---|---|---|"]
    for c in result["checks"]:
        if c["part"] == "A":
            seconds = f"{c['seconds']:.0f}" if c["seconds"] is not None else ""
            lines.append(f"| {c['name']} | {c['status']} | {c['detail'].replace('|', '/')} | {seconds} |")
    shape = result.get("bert", {}).get("shape")
    model = f"BERT hidden {shape['hidden']} x {shape['layers']} layers, seq {shape['seq']}" if shape else "BERT-base"
    lines += ["", f"## Part B: speed ({model}, bf16)", "",
              "| batch | method | status | samples/s | vs HF Trainer | MFU | dense MFU | peak GiB | rounds | note |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for c in result["checks"]:
        if c["part"] == "B":
            f = c["figures"]
            batch, method = c["name"].split()[2:4]
            lines.append("| " + " | ".join([
                batch, method, c["status"], number(f.get("samples_per_s"), "{:.1f}"), number(f.get("vs_hf_trainer"), "{:.2f}x"),
                number(f.get("mfu"), "{:.1%}"), number(f.get("mfu_dense"), "{:.1%}"), number(f.get("peak_gib"), "{:.2f}"),
                " ".join(f"{x:.0f}" for x in f.get("rounds") or []), c["detail"].replace("|", "/")]) + " |")
    lines += ["", "## Goals (ratios, reported)", "", "| goal | value | target | met |", "|---|---|---|---|"]
    for g in result["goals"]:
        met = "-" if g["met"] is None else "yes" if g["met"] else "no"
        shown = "{:.1%}" if "MFU" in g["goal"] else "{:.2f}"
        lines.append(f"| {g['goal']} | {number(g['value'], shown)} | {shown.format(g['target'])} | {met} |")
    return "\n".join(lines) + "\n"


def number(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


# ---- main ------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for proof.log, proof.json and proof.md")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: the suite's check that the script runs")
    parser.add_argument("--time-limit", type=float, default=540.0, help="seconds for the whole proof (default 540)")
    parser.add_argument("--part-a-limit", type=float, default=240.0, help="seconds from the start for Part A (default 240)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    proof = Proof(args.out, args.device == "cuda", args.smoke, args.time_limit, args.part_a_limit)
    proof.write()  # every row exists from the start, "not run: out of time" until it runs
    proof.run_check("versions", check_versions, proof)
    if proof.cuda and proof.checks["versions"].status != OK:
        for check in list(proof.checks.values())[1:]:
            proof.set(check.name, NO_CUDA, "torch sees no CUDA device: nothing else can run")
    else:
        proof.run_check("digits cpu", check_digits_reference, proof)
        for name in PRECISIONS:
            proof.run_check(f"digits {name}", check_digits, proof, name)
        proof.run_check("kill -9 and rerun", check_kill_and_rerun, proof)
        proof.run_check("own loop", check_own_loop, proof)
        proof.run_check("readme script", check_readme_script, proof)
        proof.run_check("doctor", check_doctor, proof)
        proof.run_check("pytest -m gpu", check_pytest_gpu, proof)
        proof.run_check(b_rows()[0], check_bert, proof)
    proof.write()
    shutil.rmtree(proof.work, ignore_errors=True)
    failed = proof.failed()
    cut = sum(c.status == OUT_OF_TIME for c in proof.checks.values())
    proof.say(f"done in {time.monotonic() - proof.start:.0f} s; failed: {', '.join(failed) or 'none'}; "
              f"not run for lack of time: {cut}; results in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
