"""A folder that ``paratrain run`` puts first on its workers' PYTHONPATH, for its ``sitecustomize``
(every thread's stack written to a file when the launcher stops a worker; a warm worker handed to the
pool, :mod:`~paratrain.launch.worker_site.warm_client`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

STACKS_DIR_VAR = "PARATRAIN_STACKS_DIR"


def stacks_env(stacks_dir: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Variables for the workers: this folder before the user's PYTHONPATH, and where to write."""
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join([here] + ([environ["PYTHONPATH"]] if environ.get("PYTHONPATH") else []))
    return {"PYTHONPATH": path, STACKS_DIR_VAR: stacks_dir}


def register_stacks_at_stop(environ: Mapping[str, str]) -> None:
    """On SIGTERM, first write every thread's stack to ``$PARATRAIN_STACKS_DIR/rank<RANK>.txt`` (faulthandler,
    chained: the signal then does what it did). Nothing outside ``paratrain run``; never raises."""
    import faulthandler
    import signal

    folder, rank = environ.get(STACKS_DIR_VAR), environ.get("RANK")
    if not folder or rank is None:
        return
    try:
        stacks = open(os.path.join(folder, f"rank{int(rank)}.txt"), "w")  # noqa: SIM115 (kept open for the handler)
        faulthandler.register(signal.SIGTERM, file=stacks, all_threads=True, chain=True)
    except (OSError, ValueError, RuntimeError):
        pass  # no stacks at stop for this worker; nothing else changes


def stacks_at_stop(stacks_dir: str, rank: int) -> str | None:
    """What rank ``rank``'s worker on this node wrote when it was stopped, if anything."""
    try:
        text = (Path(stacks_dir) / f"rank{rank}.txt").read_text(errors="replace")
    except OSError:
        return None
    return text or None
