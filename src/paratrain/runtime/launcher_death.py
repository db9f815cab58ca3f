"""A worker does not outlive the launcher that started it.

torch elastic's agent ends its workers when it exits or is stopped by a signal it can
catch; a launcher killed with SIGKILL (``kill -9``, the OOM killer, a lost SSH session
with no one left to forward the signal) ends nothing, and its workers live on: a hung
one forever, holding its GPU memory and its port. ``paratrain run`` exports its own pid
to the workers it starts (:data:`~paratrain.env.torchelastic.LAUNCHER_PID_VAR`); a worker
whose parent is that process asks Linux for ``PR_SET_PDEATHSIG``: SIGKILL when the
parent dies. torch's agent starts the workers from its main thread, which lives as
long as the launcher (the signal follows the creating thread, not the process).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping

from paratrain.env.torchelastic import LAUNCHER_PID_VAR

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_launcher(environ: Mapping[str, str] = os.environ) -> bool:
    """Have the kernel SIGKILL this process when its launcher dies; True when asked.

    Only the launcher's own children ask: a process they start (a DataLoader worker, a
    user's subprocess) inherits the variable but has another parent, and keeps its own
    lifetime. Does nothing off Linux or outside ``paratrain run``.
    """
    launcher = environ.get(LAUNCHER_PID_VAR, "")
    if not sys.platform.startswith("linux") or not launcher.isdigit() or os.getppid() != int(launcher):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    # The launcher may have died between starting this process and the call above: then the
    # parent is no longer the launcher, and no signal will come.
    if os.getppid() != int(launcher):
        os.kill(os.getpid(), signal.SIGKILL)
    return True
