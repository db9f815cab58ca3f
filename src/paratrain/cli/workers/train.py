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
from paratrain.errors import ConfigError, ParatrainError


def build_run(args: argparse.Namespace):
    """``(task, FitConfig)`` from parsed ``paratrain train`` options; the task is a built-in
    name or ``FILE.py:TASK`` / ``module:TASK`` (:mod:`paratrain.tasks.task_ref`, as the bench reads it).

    Raises:
        ConfigError: unknown task, a task file that does not load, or a bad option value.
    """
    from paratrain.cli.config_flags import config_from_args
    from paratrain.loop.config import FitConfig
    from paratrain.tasks.api import TaskOptions
    from paratrain.tasks.task_ref import resolve_task

    task = resolve_task(args.task, config_from_args(TaskOptions, args))
    return task, config_from_args(FitConfig, args)


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
    from paratrain.env.torchelastic import LAUNCHER_PID_VAR, record_for_launcher
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
        recorded = record_for_launcher(exc)
        end_job_instead_of_restart(exc)  # a restart would fail the same way
        if not (recorded and isinstance(exc, ConfigError) and os.environ.get(LAUNCHER_PID_VAR)):
            # A refusal (every rank makes the same one) is said once, by paratrain's launcher, from the record.
            print(f"paratrain train (rank {os.environ.get('RANK', '0')}): error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    # Trained, saved (the background writer joined), the ledger, logs and trackers closed and the process
    # group left in Trainer.fit: what is left of a normal exit is the interpreter's teardown, which the
    # launcher would wait for (env/fast_exit.py). An exception that escapes main exits the normal way.
    from paratrain.env.fast_exit import exit_without_teardown

    exit_without_teardown(main())
