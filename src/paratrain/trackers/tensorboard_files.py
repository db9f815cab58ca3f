"""TensorBoard: event files under ``OUT/tensorboard/``; a resumed run purges the failed attempt's later events."""

from __future__ import annotations

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
