"""``paratrain ckpt inspect|export``: read any paratrain checkpoint; export one weights file."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

MANUAL = """\
PATH is a checkpoint directory (runs/exp/checkpoints/step-000120), a checkpoints
directory or a run directory (their newest undamaged checkpoint), or a lone
weights file (.safetensors, or a .pt/.bin state dict).

Inspect: counters, run configuration (world size, strategy, precision, versions),
objects, every file with its size and checksum status, and the model tensors with
shapes, dtypes and sizes. Damaged files are reported, not refused.

    paratrain ckpt inspect runs/exp/checkpoints/step-000120
    paratrain ckpt inspect runs/exp --json

Export: the model weights as one consolidated safetensors file with plain key
names (no module. / _orig_mod.), from a one-file or an fsdp-sharded checkpoint
saved by any number of ranks (the job of DeepSpeed's zero_to_fp32.py). The
checkpoint is verified first; an existing output is kept unless --force.

    paratrain ckpt export runs/exp -o model.safetensors
    python -c "import safetensors.torch as s; model.load_state_dict(s.load_file('model.safetensors'))"

Nothing is ever unpickled beyond plain data: a file holding pickled objects is
refused with an explanation.
"""


def register(subparsers) -> None:
    """Add the ``ckpt`` command with ``inspect`` and ``export``."""
    parser = subparsers.add_parser(
        "ckpt",
        help="inspect a checkpoint, or export its model to one safetensors file",
        description=MANUAL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="ckpt_action", metavar="ACTION", required=True)
    inspect = actions.add_parser("inspect", help="what a checkpoint holds, with checksum status", description=MANUAL,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    inspect.add_argument("path", metavar="PATH", help="checkpoint, checkpoints/run directory, or weights file")
    inspect.add_argument("--json", action="store_true", help="print the description as JSON")
    inspect.add_argument("--all-tensors", action="store_true", help="list every tensor (default: the first 20)")
    inspect.set_defaults(handler=_inspect)
    export = actions.add_parser("export", help="model weights → one safetensors file", description=MANUAL,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    export.add_argument("path", metavar="PATH", help="checkpoint, checkpoints/run directory, or weights file")
    export.add_argument("-o", "--output", required=True, help="the .safetensors file to write")
    export.add_argument("--model", default=None, help="which model object, when the checkpoint holds several")
    export.add_argument("--force", action="store_true", help="overwrite an existing output file")
    export.set_defaults(handler=_export)


def _inspect(args: argparse.Namespace) -> int:
    from paratrain.checkpoint import describe

    info = describe(args.path)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
    else:
        _print_description(info, all_tensors=args.all_tensors)
    return 0 if info.get("verified", True) else 1  # a damaged checkpoint is described, and fails the command


def _size(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def _print_description(info: dict[str, Any], all_tensors: bool) -> None:
    out = sys.stdout.write
    out(f"{info['path']}  ({info['kind']})\n")
    if info["kind"] == "checkpoint":
        run = info.get("run", {})
        out(f"  step {info['step']}  epoch {info['epoch']}  sequence {info['sequence']}  created {info['created']}\n")
        out(
            f"  world size {run.get('world_size')}  strategy {run.get('strategy')}  precision {run.get('precision')}"
            f"  sharded {info['sharded']}  paratrain {run.get('paratrain')}  torch {run.get('torch')}\n"
        )
        if info.get("metrics"):
            out("  metrics " + "  ".join(f"{k}={v:g}" for k, v in info["metrics"].items()) + "\n")
        out("  objects " + ", ".join(f"{name} ({entry['kind']})" for name, entry in info["objects"].items()) + "\n")
        out(f"  checksums {'all ok' if info['verified'] else 'DAMAGED'}\n")
    out("files:\n")
    for item in info["files"]:
        out(f"  {item['file']:<40} {_size(item['bytes']):>10}  {item['status']}\n")
    tensors = info.get("tensors", [])
    total = sum(t["bytes"] for t in tensors)
    out(f"tensors: {len(tensors)}, {sum(_count(t['shape']) for t in tensors):,} values, {_size(total)}\n")
    shown = tensors if all_tensors else tensors[:20]
    for t in shown:
        shape = "[" + ", ".join(map(str, t["shape"])) + "]"
        out(f"  {t['object']}:{t['name']:<48} {shape:<18} {t['dtype']:<9} {_size(t['bytes']):>10}\n")
    if len(shown) < len(tensors):
        out(f"  ... {len(tensors) - len(shown)} more (--all-tensors)\n")


def _count(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _export(args: argparse.Namespace) -> int:
    from paratrain.checkpoint import export

    summary = export(args.path, args.output, model=args.model, force=args.force)
    print(
        f"wrote {summary['output']}: {summary['tensors']} tensors, {summary['parameters']:,} values, "
        f"{_size(summary['bytes'])} (from {summary['source']})"
    )
    return 0
