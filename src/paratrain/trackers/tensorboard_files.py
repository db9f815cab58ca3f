"""TensorBoard: event files under ``OUT/tensorboard/``; a resumed run purges the failed attempt's later events."""

from __future__ import annotations

import threading
from typing import Any

from paratrain.trackers.api import RunInfo, Tracker, register

DIRECTORY = "tensorboard"


@register
class TensorBoardTracker(Tracker):
    name = "tensorboard"
    package = "tensorboard"
    extra = "logging"
    rewinds = True
    files = (DIRECTORY,)

    def open(self, run: RunInfo) -> str | None:
        from torch.utils.tensorboard import SummaryWriter

        _quiet_tensorboard_thread()

        # purge_step: TensorBoard hides the events at and after it that were written before (the failed attempt's).
        self._writer: Any = SummaryWriter(log_dir=str(run.directory / DIRECTORY), purge_step=run.purge_from)
        if run.purge_from is None:  # the run's config once, as text (hparams would add a second run per call)
            rows = "\n".join(f"| {key} | {value} |" for key, value in run.config.items())
            self._writer.add_text("config", "| option | value |\n|---|---|\n" + rows, 0)
        return None

    def log(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, step)

    def close(self, failed: bool = False) -> None:
        self._writer.close()


def _quiet_tensorboard_thread() -> None:
    """TensorBoard's writer thread prints its error (a full disk, a deleted folder) as a traceback of
    its own, then the next write raises it again in the loop: keep that one (said in one line)."""
    previous = threading.excepthook
    if getattr(previous, "paratrain_tensorboard", False):
        return

    def hook(args) -> None:
        if not type(args.thread).__module__.startswith("tensorboard."):
            previous(args)

    hook.paratrain_tensorboard = True  # type: ignore[attr-defined]
    threading.excepthook = hook
