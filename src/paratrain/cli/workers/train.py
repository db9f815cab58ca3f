"""The worker of ``paratrain train``: ``python -m paratrain.cli.workers.train TASK [options]``
(``TASK``: a built-in name, ``module:attr`` or an absolute ``file.py:attr``).

``paratrain train TASK --nproc-per-node N`` starts this module on N processes
through ``paratrain run``; each one builds the same task and config from the same
words and calls the fit loop, which joins the process group.
"""

from __future__ import annotations

import argparse
import os
import sys

from paratrain.arguments import cli_spelling
from paratrain.errors import ParatrainError


def build_run(args: argparse.Namespace):
    """``(task, FitConfig)`` from parsed ``paratrain train`` options; the task is a built-in
    name or ``FILE.py:TASK`` / ``module:TASK`` (:mod:`paratrain.tasks.task_ref`, as the bench reads it).

    Raises:
        ConfigError: unknown task, a task file that does not load, or a bad option value.
    """
    from paratrain.loop.config import FitConfig
    from paratrain.tasks.api import TaskOptions
    from paratrain.tasks.task_ref import resolve_task

    options = TaskOptions(
        data=args.data, model_path=args.model_path, limit_train=args.limit_train,
        limit_eval=args.limit_eval, max_len=args.max_len,
    )
    task = resolve_task(args.task, options)
    given = {
        name: getattr(args, name)
        for name in ("epochs", "max_steps", "batch_size", "eval_batch_size", "lr", "weight_decay", "warmup",
                     "schedule", "grad_accum", "clip_norm", "eval_every", "metric", "patience", "save_every",
                     "keep_last", "log_every", "check_sync_every", "strategy", "zero_stage", "grad_compression",
                     "precision", "seed", "num_workers", "save_every_minutes", "on_nonfinite", "max_nonfinite_skips")
        if getattr(args, name) is not None
    }
    config = FitConfig(
        **given,
        eval_per_epoch=not args.no_eval_per_epoch,
        sync_batchnorm=args.sync_bn,
        group_by_length=not args.no_group_by_length,
        compile=args.compile, fused_optimizer=not args.no_fused_optimizer, tf32=not args.no_tf32,
        out_dir=args.out,
        progress=False if args.no_progress else None,
        **({"stall_timeout": args.stall_timeout or None} if args.stall_timeout is not None else {}),
        tensorboard=False if args.no_tensorboard else None,
    )
    return task, config


def main(argv: list[str] | None = None) -> int:
    """Parse, train, and turn a paratrain error or a Ctrl-C into one line (recorded for the launcher)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:  # during start-up (imports, data) or after the loop, which saves on it itself
        if os.environ.get("PARATRAIN_DEBUG"):
            raise
        print(f"paratrain train (rank {os.environ.get('RANK', '0')}): interrupted by SIGINT (Ctrl-C) outside a "
              "training step; run the same command again to resume from the newest checkpoint", file=sys.stderr, flush=True)
        return 130


def _main(argv: list[str] | None) -> int:
    from paratrain import warning_lines
    from paratrain.env.no_restart import end_job_instead_of_restart
    from paratrain.env.torchelastic import record_for_launcher
    from paratrain.cli.train_cmd import add_train_arguments
    from paratrain.loop.trainer import Trainer

    warning_lines.install()
    parser = argparse.ArgumentParser(prog="python -m paratrain.cli.workers.train")
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    try:
        with cli_spelling():  # errors name the flags this command was given
            task, config = build_run(args)
            Trainer(task, config).fit()
    except ParatrainError as exc:
        if os.environ.get("PARATRAIN_DEBUG"):
            raise
        record_for_launcher(exc)
        end_job_instead_of_restart(exc)  # a restart would fail the same way
        print(f"paratrain train (rank {os.environ.get('RANK', '0')}): error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
