"""paratrain — run one PyTorch training script on many processes, GPUs and machines.

Commands:
  paratrain run [flags] script.py [args]   launch a script on torchrun's elastic agent
  paratrain train TASK [flags]             train a built-in task on bundled data
  paratrain predict CKPT TEXT...           run a trained task model on inputs
  paratrain ckpt inspect|export PATH       read or export a paratrain checkpoint
  paratrain goodput RUN_DIR                where a run's wall time went (table, timeline PNG)
  paratrain bench [--task T]               compare ways to train one model
  paratrain doctor                         environment and network report
  paratrain check SCRIPT                   find multi-process pitfalls in a script

`paratrain COMMAND --help` explains each command with recipes.

Every error is one line that names the fix, with a non-zero exit code;
set PARATRAIN_DEBUG=1 to see the full traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from paratrain.arguments import cli_spelling
from paratrain.errors import ParatrainError

CPP_LOG_LEVEL_VAR = "TORCH_CPP_LOG_LEVEL"
# Each module has `register(subparsers)` that adds its parser and sets `handler`.
COMMAND_MODULES = ("run", "train", "predict", "ckpt", "goodput", "bench", "doctor", "check")
#: The commands whose process ends without the interpreter's teardown once ``main`` returns
#: (:mod:`paratrain.env.fast_exit`): the launchers, whose end a restarted or preempted job waits for.
FAST_EXIT_COMMANDS = ("run", "train")


def build_parser() -> argparse.ArgumentParser:
    """The ``paratrain`` parser with every command of :data:`COMMAND_MODULES` registered.

    Raises:
        ImportError: a command module does not import (a broken install, named in the traceback).
    """
    parser = argparse.ArgumentParser(
        prog="paratrain",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from paratrain._version import __version__

    parser.add_argument("--version", action="version", version=f"paratrain {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        # Every command ships with the package: one that does not import is a broken install,
        # reported with its traceback, never a command that silently vanishes from --help.
        module = importlib.import_module(f"paratrain.cli.{name}_cmd")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    from paratrain import warning_lines

    warning_lines.install()
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "verbose", False):
        # torch's C++ warnings (c10d's "hostname of the client socket cannot be retrieved" on every
        # multi-node run, store read timeouts before paratrain's own one-line error) stay out of the
        # lines users read; --verbose, or the variable set by the user, shows them. Read when torch
        # loads, which none of the above has done yet; the workers inherit it.
        os.environ.setdefault(CPP_LOG_LEVEL_VAR, "ERROR")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        from paratrain.env import variables

        # A malformed PARATRAIN_* variable is one line, never a traceback (those paratrain sets only for
        # its workers are checked by pt.Runtime there; the launchers drop them: env/variables.py)
        variables.check(skip=variables.PARATRAIN_WORKER_VARIABLES)
        with cli_spelling():  # errors name --flags here, keyword arguments in the library
            return int(args.handler(args) or 0)
    except ParatrainError as exc:
        if os.environ.get("PARATRAIN_DEBUG"):
            raise
        print(f"paratrain {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"paratrain {args.command}: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """The ``paratrain`` command and ``python -m paratrain``: :func:`main`, then its exit code.

    ``run`` and ``train`` end without the interpreter's teardown once everything they started has ended
    and what they wrote is flushed (:func:`paratrain.env.fast_exit.exit_without_teardown`: the atexit
    handlers still run); an exception that escapes ``main`` takes Python's normal way out, as do the
    other commands.
    """
    code = main()
    if sys.argv[1:2] and sys.argv[1] in FAST_EXIT_COMMANDS:
        from paratrain.env.fast_exit import exit_without_teardown

        exit_without_teardown(code)
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
