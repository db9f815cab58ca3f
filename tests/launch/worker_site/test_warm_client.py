"""A worker of ``paratrain run --warm-workers`` whose pool is missing or refuses it starts cold, saying why in
one line; one the pool takes runs there (torch imported before its first line), exits with the child's code
and passes a SIGTERM on to it, dying of the same signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from paratrain.launch import worker_site
from paratrain.launch.warm_pool import WarmPool
from paratrain.launch.worker_site.warm_client import POOL_VAR
from tests.support import clean_env

GUARD_S = 120  # a guard against a hang, not a performance limit

SCRIPT = """\
import sys, time
print("torch" in sys.modules, flush=True)
if sys.argv[1:] == ["wait"]:
    time.sleep(120)
sys.exit(5)
"""


def _run(argv, env):
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=GUARD_S)


def _ours(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("paratrain run:")]


def test_a_missing_or_refusing_pool_leaves_the_worker_cold_in_one_line_and_a_taken_one_exits_as_its_child(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    # As torch's agent starts a worker: RANK set, this process its launcher, the worker site first on the path.
    env = clean_env(RANK="0", PARATRAIN_LAUNCHER_PID=str(os.getpid()))
    env.update(worker_site.stacks_env(str(tmp_path), env))
    missing_path = str(tmp_path / "no-pool.sock")
    missing = _run([sys.executable, "-u", str(script)], {**env, POOL_VAR: missing_path})
    assert (missing.returncode, missing.stdout) == (5, "False\n"), missing.stderr
    assert missing.stderr.splitlines() == [f"paratrain run: the warm worker pool is not reachable at {missing_path} "
                                           "(No such file or directory); rank 0 starts cold"]
    with WarmPool(env) as pool:
        warm_env = {**env, POOL_VAR: pool.path}
        # Python's development mode (it warns of the stacks file the worker site keeps open: only our lines here).
        options = _run([sys.executable, "-X", "dev", "-u", str(script)], warm_env)
        assert (options.returncode, options.stdout) == (5, "False\n"), options.stderr
        assert _ours(options.stderr) == [f"paratrain run: the warm worker pool cannot run a worker started as "
                                         f"{sys.executable} -X dev …; rank 0 starts cold"]
        refused = _run([sys.executable, "-u", str(script)], {**warm_env, "PYTHONDEVMODE": "1"})
        assert (refused.returncode, refused.stdout) == (5, "False\n"), refused.stderr
        assert _ours(refused.stderr) == [
            "paratrain run: the warm worker pool refused this worker: it was started with other interpreter options "
            "than the pool (-X, -W, -O, PYTHON* variables); rank 0 starts cold"]
        taken = _run([sys.executable, "-u", str(script)], warm_env)
        assert (taken.returncode, taken.stdout, taken.stderr) == (5, "True\n", "")
        waiting = subprocess.Popen([sys.executable, "-u", str(script), "wait"], env=warm_env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            assert waiting.stdout.readline() == "True\n"
            waiting.send_signal(signal.SIGTERM)
            assert waiting.wait(timeout=GUARD_S) == -signal.SIGTERM, waiting.stderr.read()
        finally:
            waiting.kill()
            waiting.communicate()
