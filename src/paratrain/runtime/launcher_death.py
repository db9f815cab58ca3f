"""A worker does not outlive the launcher that started it.

torch elastic's agent ends its workers when it exits or is stopped by a signal it can
catch; a launcher killed with SIGKILL (``kill -9``, the OOM killer, a lost SSH session
with no one left to forward the signal) ends nothing, and its workers live on: a hung
one forever, holding its GPU memory and its port. ``paratrain run`` exports its own pid
to the workers it starts (:data:`~paratrain.env.torchelastic.LAUNCHER_PID_VAR`); a worker
whose parent is that process asks Linux for ``PR_SET_PDEATHSIG``: SIGKILL when the
parent dies. torch's agent starts the workers from its main thread, which lives as
long as the launcher (the signal follows the creating thread, not the process).

The launch layer's ``worker_site/sitecustomize.py`` asks from the worker's first line of Python,
before the script (or torch) is imported, so a launcher killed during start-up leaves nothing;
``pt.Runtime`` asks again (harmless) for workers started without that site folder. A process whose
launcher is already gone when it asks exits at once.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_launcher(environ: Mapping[str, str] = os.environ) -> bool:
    """Have the kernel SIGKILL this process when its launcher dies; True when asked.

    Only the launcher's own children ask: a process they start (a DataLoader worker, a
    user's subprocess) inherits the variable but has another parent, and keeps its own
    lifetime, unless the launcher is gone already (then it is a leftover, and exits at
    once). Does nothing off Linux or outside ``paratrain run``.
    """
    from paratrain.env.torchelastic import LAUNCHER_PID_VAR

    launcher = environ.get(LAUNCHER_PID_VAR, "")
    return launcher.isdigit() and die_with_parent(int(launcher))


def die_with_parent(parent: int) -> bool:
    """SIGKILL this process when ``parent`` (its parent's pid) dies; True when asked.

    A process whose parent is another one asks nothing, but when ``parent`` no longer exists it
    is killed now: its launcher died while it started (it was reparented before it could ask).
    """
    if not sys.platform.startswith("linux") or parent <= 1:
        return False
    if os.getppid() != parent:
        if not _alive(parent):
            os.kill(os.getpid(), signal.SIGKILL)
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    # The parent may have died between starting this process and the call above: then the
    # parent is no longer that pid, and no signal will come.
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True
