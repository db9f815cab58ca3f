"""``paratrain check``: the pitfalls of common DDP tutorials in a training script, each with its line and fix."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

MANUAL = """\
Read training scripts (without running them) for the mistakes that make a
multi-process job wrong or slow, and print each with its line, why, and the fix:

  sampler-not-passed       a DistributedSampler that no DataLoader uses (every
                           rank trains on the whole dataset)
  shuffle-with-sampler     shuffle=True beside sampler=
  no-set-epoch             a training DistributedSampler without set_epoch
  padded-eval-sampler      DistributedSampler on evaluation data (duplicates)
  local-rank-argument      --local_rank parsed as an argument (torchrun uses env)
  deprecated-launcher      torch.distributed.launch
  hardcoded-rendezvous     tcp://host:port, MASTER_ADDR/MASTER_PORT literals,
                           rank= or world_size= in the code
  save-on-every-rank       torch.save not limited to rank 0
  print-on-every-rank      print on every rank
  wrapped-state-dict       saving a DDP wrapper's state_dict ('module.' keys)
  batchnorm-without-syncbn BatchNorm under DDP without SyncBatchNorm
  model-before-seed        the model built before the seed is set
  data-parallel            nn.DataParallel instead of one process per GPU
  log-on-every-rank        logging.info on every rank (INFO level for all)
  ungathered-metric        an evaluation metric of one rank's shard, never reduced
  unseeded-split           random_split / shuffle seeded differently per rank

Scripts on Fabric, Accelerate, DeepSpeed or detectron2's launch count as
multi-process; their own print/save helpers are rank-aware. Code under a rank
test (also a helper of the file returning one), in the single-process branch
of `if distributed:`, in a launcher's parent, or in a function the script never
calls is not reported. Functions the script imports from its own project (its
folder and those above it up to the project's root) are read in their files:
a save_checkpoint, logger or rank helper there counts as the script's own.

Examples:
  paratrain check train.py
  paratrain check --json train.py other.py

Silence a finding on purpose with a comment on its line:
  torch.save(state, path)   # paratrain: ignore[save-on-every-rank]

Exit code: 0 when nothing is found, 1 when something is, 2 on bad input.
"""


def register(subparsers) -> None:
    """Add the ``check`` command."""
    parser = subparsers.add_parser(
        "check",
        help="find multi-process pitfalls in a training script (static, with line and fix)",
        description=MANUAL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scripts", nargs="+", metavar="SCRIPT", help="training script(s) to read")
    parser.add_argument("--json", action="store_true", help="one JSON object per finding, one per line")
    parser.set_defaults(handler=handler)


def handler(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from paratrain.diagnostics.check import check_file, format_finding

    found = 0
    scripts = _scripts(args.scripts)
    for script in scripts:
        findings = check_file(script)
        found += len(findings)
        for finding in findings:
            if args.json:
                print(json.dumps({"file": script, **asdict(finding)}, ensure_ascii=False))
            else:
                print(format_finding(script, finding))
    if not args.json:
        summary = f"{found} problem(s) found in {len(scripts)} script(s)" if found else f"no problems found in {len(scripts)} script(s)"
        print(summary, file=sys.stderr)
    return 1 if found else 0


def _scripts(paths: list[str]) -> list[str]:
    """The scripts to read: each file as given, each directory's ``*.py`` files (recursively,
    hidden folders skipped), in order.

    Raises:
        ConfigError: a directory that holds no Python file.
    """
    from paratrain.errors import ConfigError

    scripts: list[str] = []
    for path in paths:
        folder = Path(path)
        if not folder.is_dir():
            scripts.append(path)
            continue
        found = _python_files(folder)
        if not found:
            raise ConfigError(f"{path} is a folder with no .py file in it; pass a training script or a folder of them")
        scripts += found
    return scripts


def _python_files(folder: Path) -> list[str]:
    """The ``*.py`` files under ``folder``, hidden files and folders left out, sorted. A subfolder that cannot be
    listed — removed while it is read (a scratch folder of a running job), or unreadable — is skipped, as ``os.walk``
    does, where ``Path.rglob`` would raise and end the check with a traceback."""
    found = []
    for directory, subdirectories, files in os.walk(folder):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(".")]
        found += [os.path.join(directory, name) for name in files if name.endswith(".py") and not name.startswith(".")]
    return sorted(found)
