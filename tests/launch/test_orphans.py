"""Every process paratrain starts dies with its parent, from its first line of Python.

A plain script (no ``pt.Runtime``) under the real ``paratrain run``: the launcher is SIGKILLed
(as the OOM killer does) while its workers run, and both workers are gone at once. A worker
whose launcher is already dead when it starts exits before its script's first line.
Before the worker site asked for it, only a worker that built ``pt.Runtime`` died with its
launcher: these workers lived on, reparented to PID 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.support import paratrain_cmd

SCRIPT = """\
import os, sys, time
from pathlib import Path
Path(sys.argv[1], f"rank{os.environ['RANK']}.pid").write_text(str(os.getpid()))
time.sleep(120)
"""


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.05)
    return alive


def test_killing_the_launcher_ends_plain_script_workers_and_a_worker_of_a_dead_launcher_never_starts(tmp_path, cli_env):
    script = tmp_path / "sleeper.py"
    script.write_text(SCRIPT)
    launcher = subprocess.Popen(paratrain_cmd("run", "--nproc-per-node", "2", str(script), str(tmp_path)), env=cli_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(pids) < 2:
            assert launcher.poll() is None and time.monotonic() < deadline, "the workers did not start"
            pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid") if p.read_text()]
            time.sleep(0.05)
        launcher.send_signal(signal.SIGKILL)  # the launcher alone, as the OOM killer picks it
        launcher.wait(timeout=10)
        assert _wait_gone(pids, 10) == [], "workers outlived their SIGKILLed launcher"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # A worker started for a launcher that is already gone (its pid exited) runs nothing.
    gone = subprocess.Popen(["true"])
    gone.wait()
    site = Path(__file__).resolve().parents[2] / "src" / "paratrain" / "launch" / "worker_site"
    marker = tmp_path / "ran"
    env = dict(cli_env, PYTHONPATH=os.pathsep.join([str(site), cli_env["PYTHONPATH"]]),
               PARATRAIN_LAUNCHER_PID=str(gone.pid))
    late = subprocess.run([sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"], env=env, timeout=60, check=False)
    assert late.returncode == -signal.SIGKILL and not marker.exists()
