"""Run by Python at the start of every worker of ``paratrain run``, whatever the script.

First, the worker asks the kernel to kill it when its launcher dies (``PR_SET_PDEATHSIG``,
:mod:`paratrain.runtime.launcher_death`), and exits at once when the launcher is already gone:
a launcher killed during start-up, before any script line ran, leaves no worker behind.

When the launcher stops a worker (torch's agent sends SIGTERM to the ranks still running
after one failed), faulthandler first writes every thread's stack to
``$PARATRAIN_STACKS_DIR/rank<RANK>.txt``, then the signal ends the process as before.
After a collective timeout the launcher reads these files to name the rank that was not
in the collective (:mod:`paratrain.diagnostics.failure_report`). A script that installs
its own SIGTERM handler (``pt.fit``'s preemption) replaces this one. paratrain's own warnings
(a checkpoint loaded at another world size, …) print as one line, as under ``paratrain train``.
A script that makes its process group itself gets what ``pt.Runtime`` would give it
(:mod:`paratrain.launch.worker_site.plain_scripts`).

Python imports only the first ``sitecustomize`` on the path: the next one (a
distribution's, a virtual environment's) is run after this.
"""

import faulthandler
import importlib.machinery
import importlib.util
import os
import signal
import sys

_LAUNCHER = os.environ.get("PARATRAIN_LAUNCHER_PID", "")  # env/torchelastic.py's LAUNCHER_PID_VAR

if _LAUNCHER.isdigit():
    try:  # os, signal, ctypes only: no torch at interpreter start
        from paratrain.runtime.launcher_death import die_with_parent

        die_with_parent(int(_LAUNCHER))
    except ImportError:
        pass

_STACKS_DIR = os.environ.get("PARATRAIN_STACKS_DIR")
_RANK = os.environ.get("RANK")

if _STACKS_DIR and _RANK is not None:
    try:
        _stacks = open(os.path.join(_STACKS_DIR, f"rank{int(_RANK)}.txt"), "w")  # noqa: SIM115 (kept open)
        faulthandler.register(signal.SIGTERM, file=_stacks, all_threads=True, chain=True)
    except (OSError, ValueError, RuntimeError):
        pass  # no stacks at stop for this worker; nothing else changes

try:  # only sys, warnings and an import hook: no torch import at interpreter start
    from paratrain import warning_lines
    from paratrain.launch.worker_site import plain_scripts

    warning_lines.install()
    plain_scripts.install()  # each attempt's own store keys, the CPU share, one rank tag per line
except ImportError:
    pass


def _run_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_run_next_sitecustomize()
