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
(:mod:`paratrain.launch.worker_site.plain_scripts`). With ``--warm-workers`` a worker the agent started
hands itself to the launcher's warm pool instead of importing anything more
(:mod:`paratrain.launch.worker_site.warm_client`), and exits as the pool's child did; where the pool cannot
take it, it says why in one line and starts cold.

Python imports only the first ``sitecustomize`` on the path: the next one (a
distribution's, a virtual environment's) is run after this.
"""

import importlib.machinery
import importlib.util
import os
import sys

_LAUNCHER = os.environ.get("PARATRAIN_LAUNCHER_PID", "")  # env/torchelastic.py's LAUNCHER_PID_VAR
_WARM_POOL = os.environ.get("PARATRAIN_WARM_POOL")  # launch/worker_site/warm_client.py's POOL_VAR
_RANK = os.environ.get("RANK")

if _LAUNCHER.isdigit():
    try:  # os, signal, ctypes only: no torch at interpreter start
        from paratrain.runtime.launcher_death import die_with_parent

        die_with_parent(int(_LAUNCHER))
    except ImportError:
        pass

if _WARM_POOL and _RANK is not None and _LAUNCHER.isdigit() and os.getppid() == int(_LAUNCHER):
    # A worker torch's agent started (not a process a worker started): the warm pool's child runs it.
    try:
        from paratrain.launch.worker_site import warm_client

        _reason = warm_client.run_in_pool(_WARM_POOL)  # returns only when the pool cannot
        print(f"paratrain run: the warm worker pool {_reason}; rank {_RANK} starts cold", file=sys.stderr, flush=True)
    except ImportError:
        pass

try:  # os and faulthandler: no torch at interpreter start
    from paratrain.launch.worker_site import register_stacks_at_stop

    register_stacks_at_stop(os.environ)
except ImportError:
    pass

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
