"""The hang watchdog: progress out of band through the job's store, a named stall, a clean exit.

gloo never says which rank is late: when one rank stalls, the *waiting* ranks time out
(after the process-group timeout, minutes) and the launcher blames one of them. NCCL's
own watchdog fires after 10–30 minutes. Here every rank runs a small thread that

* publishes its progress (steps completed, phase, seconds without progress) under its
  own key in the job's TCPStore, through its own connection (the main thread may be
  blocked inside a collective or a store call; :mod:`.board`);
* reads every rank's progress; when some rank made no progress for ``stall_timeout``
  seconds, finds the rank(s) *behind* (:mod:`.stall`), writes all of
  its threads' stacks to its log (faulthandler), shares its main thread's top frames
  through the store, and ends its process with one message naming the stalled rank,
  host, step, phase and frames (also in torch elastic's error file, so ``paratrain run``
  quotes it) and exit code :data:`STALL_EXIT_CODE`.

All ranks see the same records, so all of them stop within a few polls of each other;
none waits for gloo's timeout. If C code holds the GIL forever the thread cannot run:
faulthandler's own timer, re-armed at every progress, dumps the stacks and exits instead.

Under ``paratrain run`` and ``pt.spawn`` every multi-process :class:`~paratrain.Runtime`
starts one itself (:mod:`.timeouts` says with which timeout):
``rt.loader`` batches, ``rt.backward`` and ``rt.step`` mark progress, and it ends the job
only when some rank has waited inside a collective for the stall timeout (by default the
process group's timeout, which is then given a short margin so that gloo's own timeout
never fires first and blames the waiting rank). ``Runtime(stall_timeout=0)`` / ``paratrain run --stall-timeout 0`` turn it off;
``with rt.busy("evaluation"):`` declares a long phase on some ranks that the others
wait for. An explicit watchdog (``pt.fit``'s, or an own loop's) takes over while it runs::

    with rt.watchdog(stall_timeout=120) as watchdog:
        for step, batch in enumerate(loader):
            watchdog.progress(step, "data")     # optional: rt.backward / rt.step mark their phases
            ...

The modules:

* :mod:`.thread` — :class:`Watchdog` (the thread), :class:`NoWatchdog` (its calls doing nothing),
  :func:`mark` and :func:`busy` (what the loop, the loaders and the Runtime call);
* :mod:`.verdict` — ending the job on a verdict: stopped ranks continued, the report left for the
  launcher, the process ended;
* :mod:`.stall` — pure: each rank's :class:`~.stall.Beat`, who stalled, the message;
* :mod:`.board` — the records and frames in the job's store;
* :mod:`.timeouts` — pure: the default and the Runtime's stall timeout, the process group's timeout
  beside it, the publication interval.
"""

from paratrain.diagnostics.watchdog.thread import (
    LoaderProgress,
    NoWatchdog,
    Watchdog,
    busy,
    mark,
)
from paratrain.diagnostics.watchdog.verdict import STALL_EXIT_CODE
from paratrain.diagnostics.watchdog.timeouts import (
    DEFAULT_STALL_TIMEOUT_S,
    group_timeout_with_watchdog,
    runtime_stall_timeout,
)

__all__ = [
    "DEFAULT_STALL_TIMEOUT_S",
    "STALL_EXIT_CODE",
    "LoaderProgress",
    "NoWatchdog",
    "Watchdog",
    "busy",
    "group_timeout_with_watchdog",
    "mark",
    "runtime_stall_timeout",
]
