"""What a shell leaves behind: launcher variables no launcher set for this run, and malformed
``PARATRAIN_*`` values. Each is one line, never a wait, a traceback, or a write into another run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from paratrain.checkpoint.writer_lock import HELD_BY_LAUNCHER_ENV, WriterLock, held_by_launcher
from paratrain.cli.main import main
from paratrain.env import variables
from tests.support import ROOT, clean_env, free_port, paratrain_cmd


def test_stale_launcher_variables_are_ignored_in_one_line_and_one_process_trains(tmp_path):
    # Before: the one-process run took the exports for a 2-rank job and waited for rank 1 (656 s).
    env = clean_env(WORLD_SIZE="2", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    result = subprocess.run(paratrain_cmd("train", "digits", "--max-steps", "1", "--limit-train", "64",
                                          "--limit-eval", "32", "--out", str(tmp_path / "run")),
                            env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if "ignoring" in line]
    assert len(lines) == 1
    assert lines[0].startswith("paratrain train: ignoring RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1")
    assert "no launcher set them for this run" in lines[0]
    assert "done: 1 steps" in result.stdout + result.stderr


@pytest.mark.parametrize("name, value", [("PARATRAIN_TIMEOUT", "abc"), ("PARATRAIN_STALL_TIMEOUT", "5m"),
                                         ("PARATRAIN_WAIT_REPORT_S", "-1"), ("PARATRAIN_CPU_CORES", "zz"),
                                         ("PARATRAIN_BACKEND", "cuda")])
def test_a_malformed_paratrain_variable_is_one_line(capsys, monkeypatch, tmp_path, name, value):
    monkeypatch.setenv(name, value)
    code = main(["train", "digits", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"paratrain train: error: {name}={value!r} is not {variables.PARSERS[name][1]}: fix it, or unset it (`unset {name}`)\n"
    assert not (tmp_path / "run").exists()


def test_a_variable_read_at_import_is_refused_in_one_line_too():
    # Before: `float(os.environ[...])` at import, a ValueError traceback before main() ran.
    result = subprocess.run([sys.executable, "-m", "paratrain", "train", "--list"], capture_output=True, text=True,
                            env=clean_env(PARATRAIN_STALL_TIMEOUT="abc"), timeout=60, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr == ("paratrain train: error: PARATRAIN_STALL_TIMEOUT='abc' is not a finite number of seconds, "
                             "e.g. 300 (0: no watchdog): fix it, or unset it (`unset PARATRAIN_STALL_TIMEOUT`)\n")


def test_a_leaked_run_lock_variable_does_not_share_a_live_run(monkeypatch, tmp_path):
    # Before: PARATRAIN_RUN_LOCK naming a live run's directory let any process write into it unlocked.
    live = WriterLock(tmp_path / "run").acquire()
    try:
        monkeypatch.setenv(HELD_BY_LAUNCHER_ENV, str(tmp_path / "run"))
        assert not held_by_launcher(tmp_path / "run")  # held, but by this process, not by a parent
        child = subprocess.run([sys.executable, "-c", "import sys; from paratrain.checkpoint.writer_lock import "
                                "held_by_launcher; sys.exit(0 if held_by_launcher(sys.argv[1]) else 3)",
                                str(tmp_path / "run")],
                               env={**clean_env(), HELD_BY_LAUNCHER_ENV: str(tmp_path / "run")}, timeout=60)
        assert child.returncode == 0  # the launcher's own child shares it
    finally:
        live.release()
    assert not held_by_launcher(tmp_path / "run")  # nobody holds it: the variable is stale
