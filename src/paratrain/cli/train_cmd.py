"""``paratrain train``: the fit loop on a built-in task or your own, on one or many processes."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import textwrap
from pathlib import Path

from paratrain.errors import ConfigError, LaunchError, PreemptedError

MANUAL = """\
Train a built-in task on its bundled data with the fit loop, on --nproc-per-node
processes (started through `paratrain run`, i.e. torchrun's elastic agent, which
also gets the node, rendezvous and worker flags below: --nnodes, --rdzv-*,
--backend, --log-dir, --threads-per-proc, --output, ...). One process with none of
them trains in this process.

Tasks (nothing is downloaded):
{tasks}
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

#: ``paratrain run``'s flags that ``paratrain train`` takes and passes on (any of them, even with
#: one process, trains through the launcher rather than in this process).
RUN_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--max-restarts", "--threads-per-proc",
             "--cpu-binding",
             "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-timeout", "--rdzv-last-call", "--backend",
             "--log-dir", "--output", "--local-ranks-filter", "--warm-workers")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def manual() -> str:
    """The command's help: :data:`MANUAL` with the built-in tasks and their summaries from the task registry."""
    from paratrain.tasks.registry import TASKS

    lines = [textwrap.fill(cls.summary, width=80, initial_indent=f"  {name:<10} ", subsequent_indent=" " * 13,
                           break_on_hyphens=False)
             for name, cls in TASKS.items()]
    return MANUAL.replace("{tasks}", "\n".join(lines))


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The task, its options (``TaskOptions``) and every option of the fit loop (``FitConfig``),
    one flag per field (shared by the command and its workers)."""
    from paratrain.cli.config_flags import add_flags
    from paratrain.loop.config import FitConfig
    from paratrain.tasks.api import TaskOptions
    from paratrain.tasks.registry import TASKS

    parser.add_argument("task", nargs="?", help=f"{', '.join(TASKS)}, or your own: FILE.py:TASK or module:TASK")
    add_flags(parser.add_argument_group("training"), FitConfig,
              parser.add_argument_group("strategy options (each says which strategies take it)"))
    add_flags(parser.add_argument_group("task options"), TaskOptions)


def train_argv(task: str, options, config) -> list[str]:
    """The workers' words for ``task`` with its ``TaskOptions`` and a ``FitConfig``: the values
    that differ from the defaults, which the workers parse back into equal objects."""
    from paratrain.cli.config_flags import config_words

    return [task, *config_words(options), *config_words(config)]


def register(subparsers) -> None:
    """Add the ``train`` command."""
    parser = subparsers.add_parser(
        "train",
        help="train a built-in task on bundled data (paratrain train --list) or your own (FILE.py:TASK)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="paratrain train TASK [--nproc-per-node N] [options]",
    )
    parser.set_defaults(handler=handler)
    _add_arguments_when_used(parser)


def _add_arguments_when_used(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` its manual and arguments when it first parses (``--help`` included). They
    come from FitConfig, TaskOptions and the task registry, which import torch; the other commands
    and ``paratrain --help`` start without it (tests/cli/test_main.py)."""
    parse = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        if parser.description is None:
            parser.description = manual()
            add_train_arguments(parser)
            _add_process_arguments(parser)
        return parse(args, namespace)

    parser.parse_known_args = parse_known_args  # what argparse calls on the parser of the command it was given


def _add_process_arguments(parser: argparse.ArgumentParser) -> None:
    launch = parser.add_argument_group("processes (passed to paratrain run)")
    launch.add_argument("--nproc-per-node", default="1", metavar="N|auto", help="processes on this node (default 1)")
    for flag, metavar, text, choices, switch in _run_flags():
        if switch:
            launch.add_argument(flag, action="store_true", default=None, help=text)
        else:
            launch.add_argument(flag, metavar=metavar, help=text, choices=choices)
    launch.add_argument("--list", action="store_true", help="list the tasks and exit")


def handler(args: argparse.Namespace) -> int:
    """Check everything visible here, then train in this process (1 process) or launch workers.

    Launcher variables left in the shell (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``,
    ``PARATRAIN_RUN_LOCK`` …) are ignored, said in one line: this command is the launcher.
    """
    from paratrain.env.variables import ignoring_stale_launcher_variables

    with ignoring_stale_launcher_variables("train"):
        return _train(args)


def _train(args: argparse.Namespace) -> int:
    from paratrain.cli.config_flags import config_from_args
    from paratrain.launch.config import parse_nproc
    from paratrain.loop.out_dir import hold_out_dir, prepare_out_dir
    from paratrain.tasks import task_ref
    from paratrain.tasks.api import TaskOptions
    from paratrain.tasks.registry import TASKS
    from paratrain.cli.workers.train import build_run

    if args.list or not args.task:
        for name, cls in TASKS.items():
            print(f"  {name:<10} {cls.summary}")
        return 0 if args.list else 2
    # The workers may start elsewhere (another node, a launcher's folder): they get the file's
    # absolute path, resolved here against the folder the user typed the command in.
    args.task = task_ref.absolute_ref(args.task)
    args.out_dir = args.out_dir or f"runs/{task_ref.label(args.task)}"
    from paratrain.loop.trainer import Trainer

    task, config = build_run(args)  # unknown tasks and bad values fail here, before any process starts
    # --fresh moves the old run aside here, once: the trainer and the workers find the directory ready.
    fresh, config = config.fresh, config.replace(fresh=False)
    task.check()
    trainer = Trainer(task, config)
    nproc = parse_nproc(args.nproc_per_node)
    resolve_for_workers(trainer.config, nproc, args.nnodes, args.backend)
    trainer.check()
    in_process = nproc == 1 and all(getattr(args, _dest(flag)) is None for flag in RUN_FLAGS)
    # The launcher's flags are checked too before --out is created: a refused flag leaves nothing.
    launch_config = None if in_process else _launch_config(
        args, train_argv(args.task, config_from_args(TaskOptions, args), config))
    # One writer per run directory: this command holds --out for the run's life (several nodes:
    # global rank 0 does, wherever it runs), so a second run is refused before it writes anything.
    lock = hold_out_dir(config.out_dir) if _one_node(args) else None
    try:
        _, moved = prepare_out_dir(config.out_dir, task.name, task.options.to_dict(), fresh=fresh)
        if moved:
            print(f"paratrain train: moved the previous run in {config.out_dir} to {moved}", file=sys.stderr)
        _note(Path(config.out_dir), "launch")
        if in_process:
            trainer.fit()  # one process and nothing for the launcher to do: train here
            return 0
        with _workers_share(lock):
            return _launch(launch_config, Path(config.out_dir))
    finally:
        _note(Path(config.out_dir), "end")
        if lock is not None:
            lock.release()


def _note(out: Path, event: str) -> None:
    """This launcher's start (``launch``: a run killed before its workers' ledger opened still counts) or its
    last moment (``end``: after the workers' teardown) in the run's goodput ledger, when the run has one."""
    from paratrain.goodput import ledger

    path = out / "checkpoints" / ledger.LEDGER_FILE
    if path.is_file():
        moment = (ledger.process_start_time() or time.time()) if event == "launch" else time.time()
        ledger.append_record(path, {"event": event, "time": moment, "pid": os.getpid()})


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
            strategy = config.strategy_arguments()
            resolve(strategy.pop("strategy"), config.precision, backend or "auto", world_size=nproc_per_node * nodes,
                    num_nodes=nodes,
                    tf32=config.tf32, sync_batchnorm=config.sync_batchnorm, compile=config.compile,
                    strategy_options=strategy)
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


def _run_flags() -> list[tuple[str, str | None, str | None, list | None, bool]]:
    """(flag, metavar, help, choices, switch: takes no value) of each :data:`RUN_FLAGS` entry, as
    ``paratrain run`` defines it."""
    from paratrain.cli import run_cmd

    run_parser = run_cmd.register(argparse.ArgumentParser().add_subparsers())
    actions = {flag: action for action in run_parser._actions for flag in action.option_strings}  # argparse has no public list
    text = {"--max-restarts": "restart the workers up to R times when one dies; each restart resumes from the "
                              "newest complete checkpoint (default 0)"}
    return [(flag, actions[flag].metavar, text.get(flag, actions[flag].help), actions[flag].choices,
             actions[flag].nargs == 0) for flag in RUN_FLAGS]


def run_words(args: argparse.Namespace) -> list[str]:
    """``paratrain run``'s words for the process flags given to ``paratrain train``."""
    words = ["run", "--nproc-per-node", str(args.nproc_per_node)]
    for flag in RUN_FLAGS:
        value = getattr(args, _dest(flag))
        if value is True:
            words.append(flag)
        elif value is not None:
            words += [flag, str(value)]
    return words


def _launch_config(args: argparse.Namespace, worker_words: list[str]):
    """The validated ``LaunchConfig`` of ``paratrain run [process flags] -m paratrain.cli.workers.train
    TASK [options]`` (``worker_words``: the task options as given; a task built by a factory may not keep them).

    Raises:
        ConfigError: a refused process flag, in one line (``paratrain train: error: …``).
    """
    from paratrain.cli.main import build_parser
    from paratrain.launch.config import LaunchConfig

    run_args = build_parser().parse_args([*run_words(args), "-m", "paratrain.cli.workers.train", *worker_words])
    config = LaunchConfig.from_args(run_args)
    config.validate()
    return config


def _launch(config, out: Path) -> int:
    """Start the workers of ``config`` (see :func:`_launch_config`) and wait for them."""
    from paratrain.launch.torchrun import launch

    try:
        return launch(config)
    except LaunchError as exc:
        _explain(exc, out)
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
