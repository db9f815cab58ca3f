"""Weights & Biases: one W&B run per paratrain run, resumed by id; config, metrics, summary, the final weights.

W&B is configured as its users configure it: ``WANDB_PROJECT`` (else ``paratrain``), ``WANDB_ENTITY``,
``WANDB_MODE=offline`` (files under ``OUT/wandb/``, ``wandb sync`` uploads them later), the API key from
``wandb login``. paratrain turns W&B's capture of the console off (the launcher tags every line itself)
and bounds its start-up wait (``WANDB_INIT_TIMEOUT``, else 30 s) so an unreachable server is one line.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

from paratrain.trackers.api import RunInfo, Tracker, register

DEFAULT_PROJECT = "paratrain"


@register
class WandbTracker(Tracker):
    name = "wandb"
    package = "wandb"
    extra = "wandb"
    has_artifacts = True
    holds_on_log = False  # its service writes the run file as the run ends, not at each log()
    files = ("wandb",)  # W&B's own folder under dir=

    def open(self, run: RunInfo) -> str | None:
        import wandb

        run_id = run.run_id or secrets.token_hex(4)  # chosen here, so it is kept even if init fails
        settings = wandb.Settings(console="off", silent=True, init_timeout=_init_timeout())
        # resume="allow": the same id continues the run; W&B itself drops a step below the last one it has.
        self._run: Any = wandb.init(project=os.environ.get("WANDB_PROJECT", DEFAULT_PROJECT), id=run_id,
                                    name=run.name, dir=str(run.directory), config=run.config, resume="allow",
                                    allow_val_change=True, reinit="create_new", settings=settings)
        self._name = run.name
        self.where = "offline files in " + str(Path(self._run.dir).parent) if self._run.settings.mode == "offline" else self._run.url
        return run_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def summary(self, values: dict[str, Any], step: int) -> None:
        self._run.summary.update({k: v for k, v in values.items() if isinstance(v, (int, float, str, bool))})

    def artifact(self, path: Path) -> None:
        import wandb

        artifact = wandb.Artifact(re.sub(r"[^\w.-]", "-", f"{self._name}-weights"), type="model")
        artifact.add_file(str(path))
        self._run.log_artifact(artifact)

    def close(self, failed: bool = False) -> None:
        self._run.finish(exit_code=1 if failed else 0)


def _init_timeout() -> float:
    """``WANDB_INIT_TIMEOUT`` in seconds (30 when unset).

    Raises:
        ConfigError: a value that is not a positive number of seconds (named, with one to write)."""
    from paratrain.errors import ConfigError

    text = os.environ.get("WANDB_INIT_TIMEOUT", "").strip()
    if not text:
        return 30.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"WANDB_INIT_TIMEOUT={text!r} must be a positive number of seconds; unset it or write "
                          "e.g. WANDB_INIT_TIMEOUT=30")
    return seconds
