"""``NoWatchdog``: the hang watchdog's calls with nothing behind them (no thread, store or timer)."""

from __future__ import annotations

from typing import Any


class NoWatchdog:
    """What ``rt.watchdog()`` gives when the job's stall timeout is 0 (``paratrain run
    --stall-timeout 0``): the calls of :class:`~paratrain.diagnostics.watchdog.Watchdog`, and no thread, store or timer."""

    report: str | None = None

    def progress(self, step: int | None = None, phase: str | None = None) -> None:
        pass

    def start(self) -> NoWatchdog:
        return self

    def stop(self) -> None:
        pass

    def __enter__(self) -> NoWatchdog:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
