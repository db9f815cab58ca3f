"""The warm pool's lifetimes and what passes through it, one ``paratrain run --warm-workers`` job of 2 processes
and five attempts: the agent's worker SIGKILLed (the agent's last resort) takes the pool's child with it; the
child's exit code (3) and its death by a signal (SIGSEGV) are the worker's, in the launcher's restart lines; the
launcher SIGKILLed leaves no pool, no child and no worker behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil

from paratrain.launch.worker_site.warm_client import POOL_VAR
from tests.support import ROOT, clean_env, paratrain_cmd

SCRIPT = ROOT / "tests" / "launch" / "warm_script.py"
WAIT_S = 120  # guards against a hang, not performance limits


def _started(out: Path, attempt: int, rank: int) -> dict:
    path = out / f"started.{attempt}.{rank}.json"
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert time.monotonic() < deadline, f"attempt {attempt}'s rank {rank} never started"
        time.sleep(0.05)
    return json.loads(path.read_text())


def _gone(pids: list[int], within_s: float = 10.0) -> list[int]:
    """The processes of ``pids`` still running (not zombies) after up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _agents_worker(launcher: psutil.Process, rank: int) -> psutil.Process:
    for process in launcher.children():
        try:
            if SCRIPT.name in " ".join(process.cmdline()) and process.environ().get("RANK") == str(rank):
                return process
        except psutil.Error:
            continue
    raise AssertionError(f"the launcher has no worker of rank {rank}")


def test_kills_exit_codes_and_signals_pass_through_the_pool_and_nothing_outlives_the_launcher(tmp_path):
    launcher = subprocess.Popen(
        paratrain_cmd("run", "--nproc-per-node", "2", "--max-restarts", "4", "--warm-workers",
                      "--log-dir", str(tmp_path / "logs"), str(SCRIPT),
                      str(tmp_path), "failures"),
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = _started(tmp_path, 0, 1)
        pool = first["ppid"]
        assert first["torch_before"] and pool != launcher.pid
        os.kill(_agents_worker(psutil.Process(launcher.pid), 1).pid, signal.SIGKILL)
        assert _gone([first["pid"]]) == [], "the pool's child outlived the worker torch's agent started"
        last = [_started(tmp_path, 4, rank) for rank in (0, 1)]
        assert all(started["ppid"] == pool for started in last)  # one pool served every attempt
        thins = psutil.Process(launcher.pid).children()
        folder = Path(_agents_worker(psutil.Process(launcher.pid), 0).environ()[POOL_VAR]).parent
        os.kill(launcher.pid, signal.SIGKILL)
        _, stderr = launcher.communicate(timeout=WAIT_S)
        left = _gone([pool, *(started["pid"] for started in last), *(p.pid for p in thins)])
        assert left == [], f"still running after the launcher's SIGKILL: {left}"
        shutil.rmtree(folder)  # its socket's folder, left as the launcher's other scratch folders are
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
    restarts = [line for line in stderr.splitlines() if "restarting the group" in line]
    assert len(restarts) == 4, stderr[-3000:]
    hows = ("was killed by SIGKILL", "exited with code 3", "exited with code 1 after ValueError: bad input 7",
            "was killed by SIGSEGV")
    for line, how, attempt in zip(restarts, hows, (2, 3, 4, 5)):
        assert re.match(rf"paratrain run: rank 1 \(local rank 1, host \S+, pid \d+\) {how} .*attempt {attempt} of 5",
                        line), line
    # The child wrote torch elastic's error file of the process the agent started.
    error_files = list((tmp_path / "logs").glob("*/attempt_2/1/error.json"))
    assert len(error_files) == 1 and "bad input 7" in error_files[0].read_text()
    assert "starts cold" not in stderr


def test_the_pool_ends_without_an_interpreter_teardown_once_its_launcher_lets_go(tmp_path):
    """The launcher waits for its pool at every end (the job's, a preemption's): asked to end, the pool exits 0 at
    once, with no teardown of an interpreter that holds torch (an atexit hook it registered never runs)."""
    import socket
    import sys

    from paratrain.launch import warm_pool

    mark = tmp_path / "teardown-ran"
    folder = tmp_path / "pool"
    folder.mkdir()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / warm_pool.SOCKET_NAME))
    listener.listen(4)
    read_end, write_end = os.pipe()
    code = ("import atexit, sys; atexit.register(lambda: open(sys.argv[4], 'w').close()); "
            "from paratrain.launch import warm_pool; sys.exit(warm_pool.main(sys.argv[1:4]))")
    pool = subprocess.Popen([sys.executable, "-u", "-c", code, str(listener.fileno()), str(read_end), str(os.getpid()),
                             str(mark)], pass_fds=(listener.fileno(), read_end), env=clean_env(),
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    os.close(read_end)
    listener.close()
    os.close(write_end)  # the launcher lets go: the pool sees it once its imports are done and it serves
    try:
        _, stderr = pool.communicate(timeout=WAIT_S)
    finally:
        pool.kill()
    assert pool.returncode == 0, stderr
    assert not mark.exists(), "the pool ran its interpreter's teardown (atexit) before ending"
