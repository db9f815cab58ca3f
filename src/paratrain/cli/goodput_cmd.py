"""``paratrain goodput RUN_DIR``: where a run's wall time went, attempt by attempt."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from paratrain.errors import ConfigError

MANUAL = """\
RUN_DIR is what `paratrain train --out` or `pt.fit(out_dir=...)` wrote (its ledger is
RUN_DIR/checkpoints/goodput.jsonl), or a `pt.Checkpointer` directory (DIR/goodput.jsonl).
Rank 0 of every attempt keeps the ledger: each second from the launch to the attempt's end
is start-up (launch → first step done), training, redone steps (trained again after a
failure), save blocking, evaluation or the rest; the time between one attempt's end and the
next one's launch is restart/recovery wait. Goodput is the share of the wall time (first
launch → last record) that trained steps for the first time.

    paratrain goodput runs/digits                    # the table, and runs/digits/goodput.png
    paratrain goodput runs/digits --png t.png --json # the timeline elsewhere; the numbers as JSON
"""


def register(subparsers) -> None:
    """Add the ``goodput`` command."""
    parser = subparsers.add_parser("goodput", help="where a run's wall time went: the table and a timeline PNG",
                                   description=MANUAL, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory or a checkpoint directory")
    parser.add_argument("--png", default=None, help="where to draw the timeline (default RUN_DIR/goodput.png)")
    parser.add_argument("--no-png", action="store_true", help="print the table only")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON instead of the table")
    parser.set_defaults(handler=handler)


def ledger_path(run_dir: Path) -> Path:
    """The ledger of a run or checkpoint directory.

    Raises:
        ConfigError: neither holds one.
    """
    from paratrain.goodput.ledger import LEDGER_FILE

    for candidate in (run_dir / "checkpoints" / LEDGER_FILE, run_dir / LEDGER_FILE):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"{run_dir} holds no goodput ledger ({LEDGER_FILE}): give the --out of a paratrain train run, "
                      "a pt.fit out_dir, or a pt.Checkpointer directory that a run saved into")


def handler(args: argparse.Namespace) -> int:
    from paratrain.goodput import accounting, ledger

    run_dir = Path(args.run_dir)
    path = ledger_path(run_dir)
    run = accounting.account(ledger.read_records(path))
    if run is None:
        raise ConfigError(f"{path} holds no attempt yet")
    if args.json:
        print(json.dumps(run.to_dict(), indent=1))
    else:
        print("\n".join(run.table()))
    if not args.no_png:
        from paratrain.goodput import timeline

        png = timeline.draw(run, Path(args.png) if args.png else run_dir / "goodput.png")
        if not args.json:
            print(f"timeline: {png}")
    return 0
