"""Whether a LightningModule's file runs in several processes: its own code never says (Lightning starts the
processes), its project's configuration does.

    class PDEModel(pl.LightningModule): ...          # pdearena/models/pdemodel.py: nothing about processes
    python scripts/train.py --trainer.strategy=ddp --trainer.devices=4      # docs/train.md

Read for :attr:`paratrain.diagnostics.script_facts.ScriptFacts.distributed`: every rule about several processes
then reads such a file as the others (its prints, its saves, its logged metrics run on every rank).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from paratrain.diagnostics.project_imports import read_small_file
from paratrain.diagnostics.project_mentions import marked_root, project_files

# A Trainer set to several processes where the project configures it: `strategy: ddp` in a YAML file,
# `--trainer.strategy=ddp` in a command (LightningCLI), `Trainer(accelerator="ddp")` or
# `trainer_config["accelerator"] = "ddp"` (Lightning 1.x), several devices on the command line.
# Not a conditional (mvsnerf's `distributed_backend='ddp' if args.num_gpus > 1 else None`, after forcing one GPU).
_SEVERAL = re.compile(
    rb"(?:\b(?:strategy|distributed_backend)[\"']?\]?\s*[:=]\s*[\"']?(?:ddp|deepspeed|fsdp)"
    rb"|\baccelerator[\"']?\]?\s*[:=]\s*[\"']ddp)(?!\w*[\"']?\s*if\b)"
    rb"|--trainer\.strategy[= ][\"']?(?:ddp|deepspeed|fsdp)"
    rb"|--trainer\.(?:devices|gpus)[= ](?:[2-9]|[1-9]\d)\b")


def lightning_module_run_on_several(tree: ast.Module, script: Path | None) -> bool:
    """The file defines a LightningModule (its own code says nothing of processes: Lightning starts them) and a
    Python, YAML, shell or Markdown file of its project sets the Trainer to several processes (:data:`_SEVERAL`;
    pdearena's docs run ``--trainer.strategy=ddp --trainer.devices=4``, StableSR's main.py passes
    ``accelerator="ddp"``)."""
    if script is None or not any(
            isinstance(node, ast.ClassDef) and any(re.search(r"LightningModule$", ast.unparse(b)) for b in node.bases)
            for node in ast.walk(tree)):
        return False
    root = marked_root(script.resolve())
    return root is not None and _sets_several(root)


# One device beside it: vocos's configs set `strategy: ddp` with `devices: [0]` (one process).
_ONE_DEVICE = re.compile(rb"\b(?:devices|gpus)[\"']?\]?\s*[:=]\s*(?:\[\s*\d+\s*\]|1\b|[\"']\d+,?[\"'])")


@functools.lru_cache(maxsize=4)
def _sets_several(root: Path) -> bool:
    """A Python or YAML file under ``root`` sets a Trainer to several processes (:data:`_SEVERAL`) and not to one
    device beside it (:data:`_ONE_DEVICE`), or a line of a shell or Markdown file does (each line its own command:
    pdearena's docs/train.md also runs one with ``--trainer.devices=1``)."""
    for path in project_files(root, (".py", ".yaml", ".yml", ".sh", ".md")):
        text = read_small_file(path) or b""
        parts = text.splitlines() if path.suffix in (".sh", ".md") else [text]
        if any(_SEVERAL.search(part) and not _ONE_DEVICE.search(part) for part in parts):
            return True
    return False
