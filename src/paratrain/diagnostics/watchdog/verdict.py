"""How a rank ends the job once its watchdog has a verdict: the stalled ranks of this host
continued if stopped, the report printed and left for the launcher, the process ended at once.

The main thread is stuck (in a collective or the stalled code), so nothing here unwinds it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from paratrain.diagnostics.watchdog.stall import Beat, process_state

STALL_EXIT_CODE = 124  # as GNU timeout: "it timed out"


def continue_stopped(beats: list[Beat], stalled: list[int], host: str) -> None:
    """SIGCONT the stalled ranks of this host whose process is stopped (SIGSTOP, Ctrl-Z). The launcher
    ends the job's other workers with SIGTERM, which a stopped process only receives once continued:
    torch's agent would wait its 30 s grace before SIGKILL, and the job would end ~30 s after the verdict."""
    for beat in beats:
        if beat.rank in stalled and beat.host == host and process_state(beat.pid) == "stopped":
            with contextlib.suppress(OSError):
                os.kill(beat.pid, signal.SIGCONT)


def end_process(report: str) -> None:
    """Print the report, leave it in torch elastic's error file, and exit without unwinding.

    The main thread is stuck (in a collective or the stalled code): nothing else can end it.
    """
    from paratrain.env.torchelastic import record_for_launcher
    from paratrain.errors import CollectiveTimeoutError

    print(f"paratrain watchdog: error: {report}", file=sys.stderr, flush=True)
    error = CollectiveTimeoutError(report)
    record_for_launcher(error)  # not under torchrun: the printed line is the report
    sys.stderr.flush()
    os._exit(STALL_EXIT_CODE)
