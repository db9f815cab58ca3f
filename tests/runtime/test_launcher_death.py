"""A worker of ``paratrain run`` ends when its launcher is SIGKILLed (no orphans left hanging)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil

from paratrain.env.torchelastic import LAUNCHER_PID_VAR
from paratrain.runtime.launcher_death import die_with_launcher
from tests.support import paratrain_cmd

HUNG_WORKER = textwrap.dedent(
    """
    import os, sys, time
    import paratrain as pt

    rt = pt.Runtime(timeout=60)
    with open(os.path.join(sys.argv[1], f"pid{rt.rank}"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)  # a hung worker: nothing but its launcher's death should end it
    """
)


def test_workers_die_with_a_sigkilled_launcher(tmp_path, cli_env):
    script = tmp_path / "hung.py"
    script.write_text(HUNG_WORKER)
    launcher = subprocess.Popen(paratrain_cmd("run", "--nproc-per-node", "2", str(script), str(tmp_path)),
                                env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pid_files = [tmp_path / "pid0", tmp_path / "pid1"]
        deadline = time.monotonic() + 120
        while not all(f.exists() and f.read_text() for f in pid_files):
            assert launcher.poll() is None, "the launcher ended before its workers started"
            assert time.monotonic() < deadline, "the workers did not start within 120 s"
            time.sleep(0.1)
        workers = [psutil.Process(int(f.read_text())) for f in pid_files]
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, f"workers outlived their SIGKILLed launcher: {[p.pid for p in alive]}"
    finally:
        launcher.kill()
        for f in tmp_path.glob("pid*"):
            if f.read_text() and psutil.pid_exists(int(f.read_text())):
                os.kill(int(f.read_text()), signal.SIGKILL)


def test_only_the_launchers_own_children_ask_for_the_signal():
    assert not die_with_launcher({})  # not under paratrain run
    # A grandchild (a DataLoader worker, a user's subprocess) inherits the variable: no signal for it.
    assert not die_with_launcher({LAUNCHER_PID_VAR: str(os.getpid())})
    asks = subprocess.run(
        [sys.executable, "-c", "import os; from paratrain.runtime.launcher_death import die_with_launcher as d; "
         f"print(d({{'{LAUNCHER_PID_VAR}': str(os.getppid())}}))"],
        capture_output=True, text=True, check=True,
    )
    assert asks.stdout.strip() == "True"
