"""Start several real CLI processes at once and collect their results (tests share 2 cores)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from tests.support import ROOT, clean_env

# A guard against a hang in the code under test, not a performance limit: every
# command here ends in seconds, or by its own --rdzv-timeout.
HANG_GUARD_S = 300


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


def start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        argv, cwd=ROOT, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(procs: list[subprocess.Popen]) -> list[Result]:
    """Wait for all; a process still running after the guard is killed and reported."""
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\n[test] killed after {HANG_GUARD_S}s: hang"
        results.append(Result(list(proc.args), proc.returncode, out, err))
    return results


def run_all(argvs: list[list[str]], env: dict[str, str] | None = None) -> list[Result]:
    """Start every command at once, then wait for all of them."""
    return finish([start(argv, env) for argv in argvs])
