"""The methods ``paratrain bench`` compares: what each one is, how it is started, what it needs.

A method is a training script (``scripts/``) plus the launcher its library's users
start it with. ``register`` adds one; modules named in ``PARATRAIN_BENCH_PLUGINS``
(comma-separated) are imported first, so a project can bench its own way of
training beside these (see docs/benchmarks.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paratrain.bench.machine import Machine
from paratrain.errors import ConfigError

SCRIPTS = Path(__file__).resolve().parent / "scripts"
PLUGINS_ENV = "PARATRAIN_BENCH_PLUGINS"
BENCH_EXTRA = "pip install 'paratrain[bench]'"

# launcher name → argv(script, spec_file, nproc, precision)
Launcher = Callable[[str, str, int, str], list[str]]


def _python(script: str, spec_file: str, nproc: int, precision: str) -> list[str]:
    return [sys.executable, script, spec_file]


def _paratrain_run(script: str, spec_file: str, nproc: int, precision: str) -> list[str]:
    return [sys.executable, "-m", "paratrain", "run", "--nproc-per-node", str(nproc), script, spec_file]


def _torchrun(script: str, spec_file: str, nproc: int, precision: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), script, spec_file]


def _accelerate_launch(script: str, spec_file: str, nproc: int, precision: str) -> list[str]:
    mixed = {"32-true": "no", "bf16-mixed": "bf16", "fp16-mixed": "fp16"}[precision]
    # --multi_gpu is accelerate's torchrun-based multi-process launcher; on a CPU machine its processes use gloo.
    return [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(nproc), "--num_machines", "1",
            "--mixed_precision", mixed, "--dynamo_backend", "no", *(["--multi_gpu"] if nproc > 1 else []), script, spec_file]


def horovodrun_path() -> str | None:
    beside = Path(sys.executable).with_name("horovodrun")
    return str(beside) if beside.is_file() else shutil.which("horovodrun")


def _horovodrun(script: str, spec_file: str, nproc: int, precision: str) -> list[str]:
    return [horovodrun_path() or "horovodrun", "-np", str(nproc), "-H", f"localhost:{nproc}", "--gloo",
            sys.executable, script, spec_file]


LAUNCHERS: dict[str, Launcher] = {
    "python": _python,
    "paratrain run": _paratrain_run,
    "torchrun": _torchrun,
    "accelerate launch": _accelerate_launch,
    "horovodrun": _horovodrun,
}


@dataclass(frozen=True)
class Method:
    """One way to train.

    Args:
        name: the ``--methods`` name and the table's first column.
        summary: what it is, in the words of its library.
        script: the training script (a path, or a file name under ``scripts/``).
        launcher: a key of ``LAUNCHERS``.
        multi_process: runs ``--nproc-per-node`` processes (False: one process).
        needs: modules that must import for it to run.
        install: how to get them.
        options: settings the script reads from its spec (``strategy``, …).
        amp: always trains with mixed precision (bf16 where the device has it, else fp16).
        note_here: a remark about this machine (e.g. DataParallel with one device), or None.
        refuses_here: why it does not run with ``--nproc-per-node`` processes here (the row says
            so and the method is not started), or None.
    """

    name: str
    summary: str
    script: str
    launcher: str
    multi_process: bool = True
    needs: tuple[str, ...] = ()
    install: str = BENCH_EXTRA
    options: dict[str, Any] = field(default_factory=dict)
    amp: bool = False
    note_here: Callable[[Machine, int], str | None] | None = None
    refuses_here: Callable[[Machine, int], str | None] | None = None

    @property
    def script_path(self) -> str:
        path = Path(self.script)
        return str(path if path.is_absolute() else SCRIPTS / path)

    def processes(self, nproc: int) -> int:
        return nproc if self.multi_process else 1

    def argv(self, spec_file: Path, nproc: int, precision: str) -> list[str]:
        return LAUNCHERS[self.launcher](self.script_path, str(spec_file), self.processes(nproc), precision)

    def precision(self, requested: str, machine: Machine) -> str:
        if self.amp:
            return "bf16-mixed" if machine.bf16_supported else "fp16-mixed"
        return requested

    def missing(self) -> str | None:
        """Why it cannot start here (a module or the launcher is absent, with the fix), or None."""
        for module in self.needs:
            if not _importable(module):
                return f"not installed ({module}) — {self.install}"
        if self.launcher == "horovodrun" and horovodrun_path() is None:
            return f"not installed (horovodrun) — {self.install}"
        return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is absent or broken
        return False


def _dp_note(machine: Machine, nproc: int) -> str | None:
    if machine.gpu_count >= 2:
        return f"one process, the batch split over {min(nproc, machine.gpu_count)} GPUs by threads"
    return "DataParallel needs ≥ 2 GPUs to split a batch; with one device here it runs the model as single does"


#: The replicas of the ``hsdp`` row's mesh: the bench runs on one machine, where ``hsdp``'s default
#: mesh (nodes × processes per node) is one replica, i.e. ``fsdp``; two make a 2-D mesh.
HSDP_REPLICATE = 2


def _hsdp_refusal(machine: Machine, nproc: int) -> str | None:
    if nproc % HSDP_REPLICATE:
        return (f"hsdp's 2-D mesh here is replicate {HSDP_REPLICATE} × shard --nproc-per-node/"
                f"{HSDP_REPLICATE}, and {nproc} process(es) do not split in {HSDP_REPLICATE}; use an even "
                "--nproc-per-node")
    return None


def _hsdp_note(machine: Machine, nproc: int) -> str | None:
    if _hsdp_refusal(machine, nproc):
        return None
    shard = nproc // HSDP_REPLICATE
    holds = "the whole model on every rank (shard 1)" if shard == 1 else f"1/{shard} of the model per rank"
    return (f"mesh replicate {HSDP_REPLICATE} × shard {shard} on one machine: {holds}; the replicas' all-reduce "
            "crosses no network here, so what hsdp saves between nodes is not in this row (benchmarks/hsdp_link.py "
            "measures it on a slow link)")


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add ``method`` (replacing one of the same name); returns it."""
    if method.launcher not in LAUNCHERS:
        raise ConfigError(f"method {method.name!r}: unknown launcher {method.launcher!r}; one of {', '.join(LAUNCHERS)}")
    METHODS[method.name] = method
    return method


for _method in (
    Method("single", "one process, paratrain's loop (strategy single)", "paratrain_loop.py", "python",
           multi_process=False, options={"strategy": "single"}),
    Method("dp", "torch.nn.DataParallel: one process, threads per GPU", "torch_dp.py", "python",
           multi_process=False, note_here=_dp_note),
    Method("ddp", "DistributedDataParallel started by paratrain run (torchrun's agent)", "paratrain_loop.py",
           "paratrain run", options={"strategy": "ddp"}),
    Method("ddp-spawn", "DistributedDataParallel started from a function by pt.spawn", "paratrain_spawn.py", "python",
           options={"strategy": "ddp"}),
    Method("ddp-amp", "DDP with autocast (bf16 where supported, else fp16 + GradScaler)", "paratrain_loop.py",
           "paratrain run", options={"strategy": "ddp"}, amp=True),
    Method("fsdp", "FSDP2 (fully_shard) through paratrain", "paratrain_loop.py", "paratrain run",
           options={"strategy": "fsdp"}),
    Method("hsdp", f"FSDP2 on a 2-D mesh through paratrain: replicate {HSDP_REPLICATE} × shard the rest",
           "paratrain_loop.py", "paratrain run", options={"strategy": "hsdp", "replicate": HSDP_REPLICATE},
           note_here=_hsdp_note, refuses_here=_hsdp_refusal),
    Method("deepspeed", "DeepSpeed ZeRO through paratrain (deepspeed.initialize; --zero-stage, default 2)", "paratrain_loop.py", "paratrain run",
           needs=("deepspeed",), options={"strategy": "deepspeed"}),
    Method("accelerate", "Hugging Face Accelerate: accelerate launch + Accelerator", "accelerate_script.py",
           "accelerate launch", needs=("accelerate",)),
    Method("lightning-fabric", "Lightning Fabric: Fabric(...).launch()", "fabric_script.py", "python",
           needs=("lightning.fabric",)),
    Method("hf-trainer", "transformers Trainer + TrainingArguments under torchrun", "hf_trainer.py", "torchrun",
           needs=("transformers", "accelerate")),
    Method("horovod", "Horovod: horovodrun --gloo + hvd.DistributedOptimizer", "horovod_script.py", "horovodrun",
           needs=("horovod.torch",), install="run paratrain bench --install-horovod"),
):
    register(_method)


def load_plugins() -> None:
    """Import the modules named in ``PARATRAIN_BENCH_PLUGINS``; each registers its methods.

    Raises:
        ConfigError: a module does not import.
    """
    for name in filter(None, (part.strip() for part in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise ConfigError(f"{PLUGINS_ENV}: module {name!r} does not import ({type(exc).__name__}: {exc})") from None


def select_methods(text: str) -> list[Method]:
    """``all`` or ``a,b,…`` → the methods, in the given order.

    Raises:
        ConfigError: an unknown name (lists the valid ones) or an empty list.
    """
    if text.strip() == "all":
        return list(METHODS.values())
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in METHODS]
    if unknown or not names:
        raise ConfigError(f"unknown method {', '.join(unknown) or repr(text)}; valid methods: {', '.join(METHODS)} (or all)")
    return [METHODS[name] for name in dict.fromkeys(names)]
