"""``PhaseClock``: this rank's step time split into data wait, compute and communication, from cheap host timers.

The fit loop, ``rt.loader``, ``rt.backward`` and ``rt.step`` already mark every phase change for the hang
watchdog (:func:`paratrain.diagnostics.watchdog.mark`); while a clock runs, each mark also reads
``time.perf_counter`` and adds the time since the previous mark to its part:

* **data**: ``data`` — waiting for the loader's next batch (and its copy to the device);
* **compute**: ``forward``, ``backward`` up to the last gradient, ``optimizer``, and the device
  synchronisation the fit loop already does once a step (``device``);
* **communication**: the end of ``backward`` after the last parameter's gradient was accumulated (a hook per
  parameter stamps the time): DDP waiting there for its gradient all-reduce — the link, or the other ranks.

The link: once a second the hang watchdog's thread makes one small call to the job's store on node 0 (its
progress exchanges, every poll, are several calls and rarer); the fastest of those round trips in an interval (:func:`take_link`) is this rank's link to node 0,
free of the training's own waits. No device synchronisation of its own. On CUDA the host runs ahead of the GPU, so compute and communication are
split as the host sees them, and their sum with the data wait is exact at each step's synchronisation.
"""

from __future__ import annotations

import math
import time
from typing import Any

PARTS = ("data", "compute", "communication")
_COMPUTE = frozenset(("forward", "optimizer", "device"))

_running: PhaseClock | None = None
_link_s = math.inf  # the fastest store round trip since the last take_link()


def link_sample(seconds: float) -> None:
    """One round trip of the watchdog thread to the job's store (see the module docstring)."""
    global _link_s
    _link_s = min(_link_s, seconds)


def take_link() -> float:
    """The fastest store round trip since the last call, in seconds (NaN: none, no watchdog ran)."""
    global _link_s
    fastest, _link_s = _link_s, math.inf
    return fastest if math.isfinite(fastest) else math.nan


def enter(phase: str) -> None:
    """This rank is now in ``phase`` (:func:`paratrain.diagnostics.watchdog.mark` calls it; the fit loop also for
    ``device``, its once-a-step synchronisation). Cheap; main thread."""
    if _running is not None:
        _running.enter(phase)


class PhaseClock:
    """Seconds spent in each part and optimizer steps taken since the last :meth:`take`. One per process, while
    :meth:`start`-ed; not collective."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.steps = 0
        self._phase: str | None = None
        self._since = time.perf_counter()
        self._grad_at = 0.0
        self._hooks: list[Any] = []

    def watch(self, model: Any) -> None:
        """Stamp the time each parameter's gradient is accumulated (the last stamp ends backward's compute)."""
        for parameter in model.parameters():
            if parameter.requires_grad:
                self._hooks.append(parameter.register_post_accumulate_grad_hook(self._gradient_ready))

    def _gradient_ready(self, _parameter: Any) -> None:
        self._grad_at = time.perf_counter()

    def enter(self, phase: str) -> None:
        if phase == self._phase:
            return
        now = time.perf_counter()
        spent, left = now - self._since, self._phase
        if left == "data":
            self.seconds[0] += spent
        elif left == "backward":
            waited = now - self._grad_at if self._grad_at > self._since else 0.0
            self.seconds[1] += spent - waited
            self.seconds[2] += waited
        elif left in _COMPUTE:
            self.seconds[1] += spent
        if phase == "optimizer":
            self.steps += 1
        self._phase, self._since = phase, now

    def take(self) -> tuple[int, list[float]]:
        """``(steps, [data, compute, communication] seconds)`` since the last take; starts a new interval."""
        taken = self.steps, self.seconds
        self.steps, self.seconds = 0, [0.0, 0.0, 0.0]
        return taken

    def start(self) -> PhaseClock:
        global _running
        _running = self
        return self

    def stop(self) -> None:
        global _running
        if _running is self:
            _running = None
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
