"""``--legacy-local-rank``: the command-line flag that old launch scripts expect.

``python -m torch.distributed.launch`` passed ``--local_rank=N`` to every worker
until torch 2.0, then ``--local-rank=N`` (pytorch/pytorch#94505). Scripts
written for one spelling fail with "unrecognized arguments" on the other, and scripts
from the classic DDP and APEX tutorials fail with "required: --local_rank" under torchrun, which passes
neither. We append the spelling the script parses; torch elastic replaces the
``${local_rank}`` macro per worker (torch.distributed.elastic.utils.macros).
"""

from __future__ import annotations

from pathlib import Path

from paratrain.errors import ConfigError

SPELLINGS = ("local_rank", "local-rank")
CHOICES = ("auto", *SPELLINGS)
# What torch.distributed.launch has passed since torch 2.0; used when the source says nothing.
DEFAULT_SPELLING = "local-rank"


def local_rank_argument(choice: str, target: str, module: bool = False) -> str:
    """The argument to append for each worker, e.g. ``--local_rank=${local_rank}``.

    ``choice`` is ``auto`` (read the script's source and pick the spelling it
    parses), ``local_rank`` or ``local-rank``.

    Raises:
        ConfigError: ``choice`` is not one of :data:`CHOICES`.
    """
    if choice not in CHOICES:
        raise ConfigError(f"--legacy-local-rank {choice!r} is not one of {', '.join(CHOICES)}")
    from torch.distributed.elastic.utils import macros  # here: the command line starts without torch

    spelling = spelling_in_source(_source_of(target, module)) if choice == "auto" else choice
    return f"--{spelling}={macros.local_rank}"


def parses_local_rank(target: str, module: bool = False) -> bool:
    """True when the script's source mentions ``--local_rank`` or ``--local-rank``."""
    source = _source_of(target, module) or ""
    return "--local_rank" in source or "--local-rank" in source


def spelling_in_source(source: str | None) -> str:
    """``local_rank`` or ``local-rank``: the one the source mentions.

    When both appear the parser accepts both (argparse aliases); the underscore form
    is the older and so the likelier one to be handled everywhere in the script.
    """
    if source and "--local_rank" in source:
        return "local_rank"
    if source and "--local-rank" in source:
        return "local-rank"
    return DEFAULT_SPELLING


def _source_of(target: str, module: bool) -> str | None:
    """The script's text, or the module's (found without importing it)."""
    path: Path | None = Path(target)
    if module:
        from paratrain.launch.module_path import find_module

        spec = find_module(target)
        path = Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path else None
    except OSError:
        return None
