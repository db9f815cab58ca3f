"""BERT-base training throughput on one device: paratrain vs HF Trainer, Accelerate, Fabric, a compiled loop.

Every method trains a ``BertForSequenceClassification`` built from the BERT-base config
(hidden 768, 12 layers, 12 heads, intermediate 3072, vocab 30522; random init, nothing
downloaded) on the same synthetic batches (random token ids, sequence 128, fixed seed),
in one process on one device, with the same learning rate and bf16 autocast. The
methods run one after another and alternate over ``--rounds`` so that machine noise
hits all of them; each row is the median of its rounds. A round goes through every batch
size before the next round starts, so ``--time-limit`` (no measurement starts that would
end after it) cuts rounds, not batch sizes; ``--json`` is rewritten after every measurement,
so a run stopped from outside still leaves what it measured. A peer that is not installed is
a "not installed" row.

    method             what runs
    paratrain          the user's loop on pt.Runtime (PARATRAIN_OPTIONS below + paratrain's
                       own defaults, e.g. whether it compiles): rt.setup, rt.autocast,
                       rt.backward, rt.step
    paratrain-compile  the same loop on pt.Runtime(..., compile=True)
    paratrain-fit      pt.fit(model, dataset, ...) on the same Runtime settings as paratrain
    hf-trainer         transformers.Trainer, bf16=True, its own optimizer choice and defaults
    accelerate         Accelerator(mixed_precision="bf16"), prepare, accelerator.backward
    fabric             Fabric(precision="bf16-mixed"), setup, fabric.backward
    raw-compiled       plain loop: torch.autocast(bf16), torch.compile, AdamW(fused=True)

On the CPU nothing compiles unless ``--compile on`` (without it paratrain-compile is left
out and raw-compiled runs uncompiled).

Timing: each method's first ``--warmup-steps`` optimizer steps (torch.compile, cuDNN/
cuBLAS autotuning, allocator growth) are not timed; the clock starts after a
``torch.cuda.synchronize()`` at the end of the last warm-up step and stops after one at
the end of step ``warmup + steps``. The benchmark reads nothing back from the device inside
the timed steps; what a library does there itself (HF Trainer's NaN check of every loss,
pt.fit's periodic logging) is part of its number.

MFU (model FLOPs utilisation) = samples/s x FLOPs per sample / (``--peak-tflops`` x 1e12),
with the training FLOPs of one sample of ``seq`` tokens (forward + backward = 3 x forward):

    FLOPs/sample = 6 x params x seq  +  12 x layers x seq^2 x hidden

``params`` counts every parameter (embeddings included, the convention of the figures
this benchmark is compared with); the second term is attention's QK^T and AV matmuls.
``mfu_dense`` uses the parameters of matmuls only (embeddings excluded), which is the
stricter figure (BERT-base here: 109.5 M parameters, 23.8 M of them embeddings;
85.9 vs 67.6 GFLOP per sample at seq 128). The default peak 989 TFLOP/s is an H100 SXM's dense bf16; pass ``--peak-tflops`` for another GPU.

On a GPU machine (an estimate, not yet measured: 5-10 minutes for the defaults on an H100,
most of it the torch.compile warm-ups; split --batch-sizes over two calls to stay shorter):

    PYTHONPATH=src python benchmarks/gpu_bert.py --batch-sizes 32 256 --json gpu_bert.json

(one visible GPU: HF Trainer would spread over all visible GPUs with DataParallel, so the
script refuses more; pick one with CUDA_VISIBLE_DEVICES=N).

Smoke run on a CPU (2-layer, 64-wide BERT, sequence 32, batch 4, 3 timed steps):

    python benchmarks/gpu_bert.py --device cpu --tiny
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import logging
import os
import statistics
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields as dataclass_fields

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from paratrain.bench.machine import detect_machine

# paratrain's row: what a user passes to pt.Runtime for this job. Everything else (compile,
# fused optimizer, TF32, ...) is left to paratrain's own defaults, so the row follows them.
PARATRAIN_OPTIONS = {"precision": "bf16-mixed"}

LR = 5e-5
WEIGHT_DECAY = 0.01
SEED = 0
METHODS = ("paratrain", "paratrain-compile", "paratrain-fit", "hf-trainer", "accelerate", "fabric", "raw-compiled")
# What each peer's row imports besides torch and transformers: a missing one makes a "not installed" row.
PEER_PACKAGES = {"hf-trainer": ("accelerate",), "accelerate": ("accelerate",), "fabric": ("lightning",)}


@dataclass(frozen=True)
class Shape:
    """The model and batch geometry of one run."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    seq: int


BERT_BASE = Shape(hidden=768, layers=12, heads=12, intermediate=3072, vocab=30522, seq=128)
TINY = Shape(hidden=64, layers=2, heads=2, intermediate=256, vocab=30522, seq=32)


@dataclass(frozen=True)
class Job:
    """What every method of one (batch size, round) measurement gets."""

    shape: Shape
    batch: int
    warmup: int
    steps: int
    device: torch.device
    compile_raw: bool

    @property
    def total_steps(self) -> int:
        return self.warmup + self.steps

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


# ---- model and data -------------------------------------------------------------------
def build_model(shape: Shape) -> torch.nn.Module:
    """BertForSequenceClassification (2 labels) from a config, random init with a fixed seed."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, intermediate_size=shape.intermediate,
        max_position_embeddings=max(512, shape.seq), num_labels=2,
    )
    torch.manual_seed(SEED)
    return BertForSequenceClassification(config)


class TokenBatches(Dataset):
    """``n`` samples of random token ids (full attention mask) and random labels, fixed seed."""

    def __init__(self, n: int, shape: Shape):
        generator = torch.Generator().manual_seed(SEED)
        self.input_ids = torch.randint(0, shape.vocab, (n, shape.seq), generator=generator)
        self.labels = torch.randint(0, 2, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.input_ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": self.labels[i]}


def loader(data: Dataset, job: Job) -> DataLoader:
    """The same batches, in the same order, for the methods that take a DataLoader."""
    return DataLoader(data, batch_size=job.batch, shuffle=False, pin_memory=job.cuda)


def adamw(model: torch.nn.Module, **kwargs) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, **kwargs)


# ---- timing ---------------------------------------------------------------------------
class StepClock:
    """Called after every optimizer step; times steps warmup+1 … warmup+steps."""

    def __init__(self, job: Job):
        self.job = job
        self.step_count = 0
        self.start = self.end = None

    def _now(self) -> float:
        if self.job.cuda:
            torch.cuda.synchronize(self.job.device)
        return time.perf_counter()

    def step(self) -> None:
        self.step_count += 1
        if self.step_count == self.job.warmup:
            self.start = self._now()
        elif self.step_count == self.job.total_steps:
            self.end = self._now()

    def seconds(self) -> float:
        if self.start is None or self.end is None:
            raise RuntimeError(f"the method made {self.step_count} optimizer steps, not {self.job.total_steps}")
        return self.end - self.start


# ---- the methods, each in its own library's idiom -------------------------------------
def paratrain_runtime(job: Job, **extra):
    import paratrain as pt

    rt = pt.Runtime(**PARATRAIN_OPTIONS, **extra, seed=SEED)
    if rt.device != job.device:
        raise RuntimeError(f"pt.Runtime chose {rt.device}, the other methods run on {job.device}")
    return rt


def paratrain_loop(job: Job, data: Dataset, clock: StepClock, **extra) -> str:
    """The loop a paratrain user writes, on pt.Runtime(**PARATRAIN_OPTIONS, **extra)."""
    rt = paratrain_runtime(job, **extra)
    model = build_model(job.shape)
    model, optimizer = rt.setup(model, adamw(model))
    for batch in rt.loader(data, batch_size=job.batch):  # on rt.device, copied from pinned memory
        with rt.autocast():
            loss = model(**batch).loss
        rt.backward(loss, model)
        rt.step(optimizer, model=model)
        clock.step()
    note = f"compile={rt.strategy.compile}, {optimizer_kind(optimizer)}"
    rt.close()
    return note


def run_paratrain(job: Job, data: Dataset, clock: StepClock) -> str:
    return paratrain_loop(job, data, clock)


def run_paratrain_compile(job: Job, data: Dataset, clock: StepClock) -> str:
    # paratrain's documented switch, for the row next to its default (the same row once compile is the default).
    return paratrain_loop(job, data, clock, compile=True)


def run_paratrain_fit(job: Job, data: Dataset, clock: StepClock) -> str:
    import paratrain as pt

    seen = {}

    class Clock(pt.Callback):
        def on_step_end(self, trainer, step, loss):
            clock.step()
            seen["optimizer"] = trainer.optimizer

    rt = paratrain_runtime(job)
    compiles = rt.strategy.compile
    # pt.fit needs an eval set and evaluates once after the last step (outside the clock): one batch.
    eval_data = Subset(data, range(job.batch))
    pt.fit(build_model(job.shape), data, eval_data, runtime=rt, callbacks=[Clock()], max_steps=job.total_steps,
           batch_size=job.batch, lr=LR, weight_decay=WEIGHT_DECAY, schedule="constant", warmup=0.0,
           progress=False, tensorboard=False, seed=SEED)
    rt.close()
    return f"compile={compiles}, {optimizer_kind(seen['optimizer'])}, pt.fit's shuffled loader"


def run_hf_trainer(job: Job, data: Dataset, clock: StepClock) -> str:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            clock.step()

    known = {f.name for f in dataclass_fields(TrainingArguments)}
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=job.batch, max_steps=job.total_steps,
            learning_rate=LR, weight_decay=WEIGHT_DECAY, lr_scheduler_type="constant",
            bf16=True, use_cpu=not job.cuda, seed=SEED, save_strategy="no", eval_strategy="no",
            report_to="none", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
            # The same order as the other loops where this transformers has the switch (it shuffles otherwise).
            **({"train_sampling_strategy": "sequential"} if "train_sampling_strategy" in known else {}),
        )
        trainer = Trainer(model=build_model(job.shape), args=args, train_dataset=data, callbacks=[Clock()])
        trainer.train()
    optim = getattr(args.optim, "value", args.optim)
    return f"optim={optim}, its default grad clip {args.max_grad_norm}"


def run_accelerate(job: Job, data: Dataset, clock: StepClock) -> str:
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16", cpu=not job.cuda)
    model = build_model(job.shape)
    optimizer = adamw(model)
    model, optimizer, batches = accelerator.prepare(model, optimizer, loader(data, job))
    for batch in batches:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        clock.step()
    accelerator.end_training()
    return optimizer_kind(optimizer)


def run_fabric(job: Job, data: Dataset, clock: StepClock) -> str:
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cuda" if job.cuda else "cpu", devices=1, precision="bf16-mixed")
    fabric.launch()
    model = build_model(job.shape)
    optimizer = adamw(model)
    model, optimizer = fabric.setup(model, optimizer)
    for batch in fabric.setup_dataloaders(loader(data, job)):
        loss = model(**batch).loss
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        clock.step()
    return optimizer_kind(optimizer)


def run_raw_compiled(job: Job, data: Dataset, clock: StepClock) -> str:
    model = build_model(job.shape).to(job.device)
    optimizer = adamw(model, fused=True)
    step_model = torch.compile(model) if job.compile_raw else model
    for batch in loader(data, job):
        batch = {k: v.to(job.device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(job.device.type, dtype=torch.bfloat16):
            loss = step_model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        clock.step()
    return f"compile={job.compile_raw}, {optimizer_kind(optimizer)}"


def optimizer_kind(optimizer) -> str:
    """'AdamW fused', 'AdamW foreach', or torch's own choice when neither was asked for
    (foreach for CUDA parameters, the per-parameter for-loop for CPU ones)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # Accelerate's and Fabric's wrappers
    defaults = getattr(inner, "defaults", {})
    if defaults.get("fused"):
        mode = "fused"
    elif defaults.get("foreach"):
        mode = "foreach"
    else:
        on_cuda = all(p.is_cuda for group in inner.param_groups for p in group["params"])
        mode = "foreach (torch's default)" if on_cuda else "for-loop (torch's default)"
    return f"{type(inner).__name__} {mode}"


RUNNERS: dict[str, Callable[[Job, Dataset, StepClock], str]] = {
    "paratrain": run_paratrain,
    "paratrain-compile": run_paratrain_compile,
    "paratrain-fit": run_paratrain_fit,
    "hf-trainer": run_hf_trainer,
    "accelerate": run_accelerate,
    "fabric": run_fabric,
    "raw-compiled": run_raw_compiled,
}


# ---- measuring ------------------------------------------------------------------------
def flops_per_sample(model: torch.nn.Module, shape: Shape) -> tuple[float, float]:
    """(with every parameter, with matmul parameters only): see the module docstring."""
    params = sum(p.numel() for p in model.parameters())
    embedding = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding))
    attention = 12 * shape.layers * shape.seq**2 * shape.hidden
    return 6 * params * shape.seq + attention, 6 * (params - embedding) * shape.seq + attention


def release(job: Job) -> None:
    """Forget compiled graphs, free memory and restart the peak counter between methods."""
    torch._dynamo.reset()
    gc.collect()
    if job.cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(job.device)


def missing_packages(method: str) -> list[str]:
    return [name for name in PEER_PACKAGES.get(method, ()) if importlib.util.find_spec(name) is None]


def measure(method: str, job: Job, data: Dataset) -> dict:
    """One method once. A method that fails is reported in its row (traceback on stderr), not fatal:
    one broken peer must not cost the other rows of a GPU run."""
    release(job)
    clock = StepClock(job)
    try:
        note = RUNNERS[method](job, data, clock)
        rate = job.steps * job.batch / clock.seconds()
    except Exception as error:  # noqa: BLE001 - any peer's failure becomes its row's note
        traceback.print_exc()
        note, rate = f"FAILED: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}", None
    peak = torch.cuda.max_memory_allocated(job.device) / 2**30 if job.cuda else None
    release(job)
    return {"samples_per_s": rate, "peak_gib": peak, "note": note}


class TimeLimit:
    """``--time-limit``: a measurement starts only when it is expected to end in time — as long as
    the same method's last one at that batch size took; else its longest at another batch size;
    else the longest measurement so far."""

    def __init__(self, seconds: float | None):
        self.end = None if seconds is None else time.monotonic() + seconds
        self.took: dict[tuple[int, str], float] = {}

    def allows(self, batch: int, method: str) -> bool:
        if self.end is None:
            return True
        same_method = [took for (_, m), took in self.took.items() if m == method]
        expected = self.took.get((batch, method), max(same_method or self.took.values(), default=0.0))
        return time.monotonic() + expected < self.end

    def record(self, batch: int, method: str, seconds: float) -> None:
        self.took[(batch, method)] = seconds
def device_name(device: torch.device, machine) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA {machine.cuda}, NCCL {machine.nccl})"
    return f"CPU {machine.cpu_model} ({machine.cpu_cores} cores, {torch.get_num_threads()} torch threads)"


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        # pt.Runtime has no device argument: it takes cuda:LOCAL_RANK whenever CUDA is visible,
        # unless the environment holds PARATRAIN_DEVICE=cpu (runtime/device.py).
        os.environ["PARATRAIN_DEVICE"] = "cpu"
    machine = detect_machine()  # before the runs: the load average the runs start under
    shape = TINY if args.tiny else BERT_BASE
    compile_raw = {"on": True, "off": False, "auto": device.type == "cuda"}[args.compile]
    per_sample, per_sample_dense = flops_per_sample(build_model(shape), shape)
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(device, machine), "versions": machine.versions, "python": machine.python,
        "shape": asdict(shape),
        "steps": args.steps, "warmup_steps": args.warmup_steps, "rounds": args.rounds, "time_limit": args.time_limit,
        "peak_tflops": args.peak_tflops, "flops_per_sample": per_sample, "flops_per_sample_dense": per_sample_dense,
        "paratrain_options": PARATRAIN_OPTIONS, "load_average": machine.load_average, "machine": machine.to_dict(),
    }
    jobs = {batch: Job(shape, batch, args.warmup_steps, args.steps, device, compile_raw) for batch in args.batch_sizes}
    data = {batch: TokenBatches(job.total_steps * batch, shape) for batch, job in jobs.items()}
    missing = {m: missing_packages(m) for m in args.methods}
    runs: dict[tuple[int, str], list[dict]] = {(b, m): [] for b in args.batch_sizes for m in args.methods}
    limit = TimeLimit(args.time_limit)
    # Round-major: with a time limit, every batch size gets its first round before any gets a second.
    for round_index in range(args.rounds):
        for batch, job in jobs.items():
            order = args.methods if round_index % 2 == 0 else args.methods[::-1]
            for method in order:
                if missing[method] or not limit.allows(batch, method):
                    continue
                begin = time.monotonic()
                outcome = measure(method, job, data[batch])
                limit.record(batch, method, time.monotonic() - begin)
                runs[(batch, method)].append(outcome)
                rate = outcome["samples_per_s"]
                print(f"  batch {batch} round {round_index + 1}/{args.rounds} {method}: "
                      + (f"{rate:.1f} samples/s" if rate else outcome["note"]), flush=True)
                if args.json:  # what is known so far, should the process be stopped before its end
                    write_json(args.json, {**result, "rows": rows_of(runs, missing, result, args, final=False)})
    return {**result, "rows": rows_of(runs, missing, result, args, final=True)}


def rows_of(runs: dict[tuple[int, str], list[dict]], missing: dict[str, list[str]], result: dict,
            args: argparse.Namespace, final: bool) -> list[dict]:
    """One row per batch size and method: the median of its rounds so far."""
    peak = args.peak_tflops * 1e12
    rows = []
    for batch in args.batch_sizes:
        for method in args.methods:
            done = runs[(batch, method)]
            rates = [r["samples_per_s"] for r in done if r["samples_per_s"] is not None]
            rate = statistics.median(rates) if rates else None
            peaks = [r["peak_gib"] for r in done if r["peak_gib"] is not None]
            failure = next((r["note"] for r in done if r["samples_per_s"] is None), None)
            if missing[method]:
                status, note = "not installed", f"not installed: {', '.join(missing[method])}"
            elif not done:
                status = "not run: out of time"
                note = f"{status} (--time-limit {args.time_limit:g} s)" if final else f"{status} (the run was stopped)"
            else:  # a failure in any round is shown, else the last round's note
                status, note = ("failed" if failure else "ok"), failure or done[-1]["note"]
            rows.append({
                "method": method, "batch": batch, "status": status, "samples_per_s": rate, "rounds": rates,
                "mfu": rate * result["flops_per_sample"] / peak if rate else None,
                "mfu_dense": rate * result["flops_per_sample_dense"] / peak if rate else None,
                "peak_gib": max(peaks) if peaks else None, "note": note,
            })
        reference = next((r["samples_per_s"] for r in rows if r["batch"] == batch and r["method"] == "hf-trainer"), None)
        for row in rows:
            if row["batch"] == batch:
                row["vs_hf_trainer"] = row["samples_per_s"] / reference if reference and row["samples_per_s"] else None
    return rows


def write_json(path: str, result: dict) -> None:
    """Whole or not at all: a reader never sees half a file."""
    partial = f"{path}.partial"
    with open(partial, "w") as f:
        json.dump(result, f, indent=2)
    os.replace(partial, path)


def table(result: dict) -> str:
    shape = result["shape"]
    load = " ".join(f"{x:.1f}" for x in result["load_average"] or ())
    on_cpu = result["device"].startswith("CPU")  # no meaningful peak: MFU is printed for GPUs only
    lines = [
        f"{result['date']}  {result['device']}",
        "  ".join(f"{k} {v}" for k, v in result["versions"].items() if v) + f"  python {result['python']}",
        f"BERT hidden {shape['hidden']} x {shape['layers']} layers, seq {shape['seq']}; "
        f"{result['warmup_steps']} warm-up + {result['steps']} timed steps, median of {result['rounds']} alternating rounds; "
        f"{result['flops_per_sample'] / 1e9:.3g} GFLOP/sample ({result['flops_per_sample_dense'] / 1e9:.3g} dense); "
        f"peak {result['peak_tflops']:g} TFLOP/s; load average {load}",
        "",
        f"{'method':<18}{'batch':>6}{'samples/s':>11}{'vs HF':>7}{'MFU':>7}{'dense':>7}{'peak GiB':>10}  rounds / notes",
    ]
    for r in result["rows"]:
        ratio = f"{r['vs_hf_trainer']:.2f}x" if r.get("vs_hf_trainer") else "-"
        rate = f"{r['samples_per_s']:.1f}" if r["samples_per_s"] else "-"
        peak = f"{r['peak_gib']:.2f}" if r["peak_gib"] is not None else "-"
        rounds = " ".join(f"{x:.1f}" for x in r["rounds"])
        mfu, dense = ("-", "-") if on_cpu or not r["mfu"] else (f"{r['mfu']:.1%}", f"{r['mfu_dense']:.1%}")
        lines.append(f"{r['method']:<18}{r['batch']:>6}{rate:>11}{ratio:>7}"
                     f"{mfu:>7}{dense:>7}{peak:>10}  [{rounds}] {r['note']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (exactly one visible GPU: pick it with CUDA_VISIBLE_DEVICES) or cpu")
    parser.add_argument("--tiny", action="store_true", help="2-layer 64-wide BERT, seq 32; batch 4, 3 steps unless given")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="per-step batch sizes (default 32 256; --tiny: 4)")
    parser.add_argument("--steps", type=int, help="timed steps per method and round (default 50; --tiny: 3)")
    parser.add_argument("--warmup-steps", type=int, help="untimed steps first (default 10; --tiny: 2)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating repetitions (default 3; --tiny: 1)")
    parser.add_argument("--methods", nargs="+", choices=METHODS,
                        help="default: all (on the CPU without paratrain-compile unless --compile on)")
    parser.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                        help="compile raw-compiled, and run paratrain-compile by default (auto: on CUDA only)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="device peak for MFU (H100 SXM dense bf16: 989)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: 1 with --device cpu)")
    parser.add_argument("--time-limit", type=float, metavar="SECONDS",
                        help="start no measurement that would end later than this (rows left: 'not run: out of time')")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    defaults = {"batch_sizes": [4], "steps": 3, "warmup_steps": 2, "rounds": 1} if args.tiny else \
               {"batch_sizes": [32, 256], "steps": 50, "warmup_steps": 10, "rounds": 3}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.methods is None:
        compiles = args.compile == "on" or (args.compile == "auto" and args.device == "cuda")
        args.methods = [m for m in METHODS if compiles or m != "paratrain-compile"]
    if args.steps < 1 or args.warmup_steps < 1 or args.rounds < 1:
        parser.error("--steps, --warmup-steps and --rounds must be at least 1 (the clock starts after a warm-up step)")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible here; use --device cpu --tiny for the smoke run")
    if args.device == "cuda" and torch.cuda.device_count() > 1:
        parser.error(f"{torch.cuda.device_count()} GPUs are visible and HF Trainer would use all of them (DataParallel); "
                     "set CUDA_VISIBLE_DEVICES to one GPU")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads or args.device == "cpu":
        torch.set_num_threads(args.threads or 1)
    # The peers' own info logs and deprecation notices would bury the table.
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    result = run(args)
    print(table(result))
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
