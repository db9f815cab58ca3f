"""One run of ``paratrain train`` on 2 processes with background saves, SIGKILLed at two moments of a
background write, rerun unchanged until it ends; checked for everything at once:

* the resumed run ends bit-identical to an uninterrupted run with foreground saves;
* no temporary checkpoint directory is left; the end of the run waits for the last write and says so;
* the goodput ledger puts every second of the three attempts in a category, each category that must
  hold time holds some, and its goodput agrees within one point with a clock outside the job;
* ``paratrain goodput`` prints the table and draws the timeline; ``summary.json`` holds the sums.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import clean_env

PAUSED = "PARATRAIN_TEST_PAUSE_IN_SAVE: pausing"


def _command(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "paratrain", "train", "digits", "--nproc-per-node", "2", "--max-steps", "160",
            "--save-every", "20", "--keep-last", "2", "--log-every", "20", "--no-tensorboard", "--no-progress",
            "--out", str(out), *extra]


def _run(out: Path, log: Path, pause: str | None, kill_when_paused: bool) -> tuple[int, str]:
    env = clean_env(**({"PARATRAIN_TEST_PAUSE_IN_SAVE": pause} if pause else {}))
    with open(log, "w") as console:
        process = subprocess.Popen(_command(out), env=env, stdout=console, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while kill_when_paused and PAUSED not in log.read_text() and process.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        if kill_when_paused:
            os.killpg(process.pid, signal.SIGKILL)  # the whole job, mid-write
        code = process.wait(timeout=240)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return code, log.read_text()


def _final_weights(out: Path) -> bytes:
    from paratrain.checkpoint import catalog

    path, manifest = catalog.complete(out / "checkpoints")[-1]
    assert manifest.step == 160
    return (path / "model.safetensors").read_bytes()


def test_kill_during_background_writes_resumes_bit_identical_and_the_ledger_accounts_for_every_second(tmp_path):
    reference = tmp_path / "reference"
    code, text = _run(reference, tmp_path / "reference.log", None, False)
    assert code == 0, text[-3000:]
    out = tmp_path / "run"
    outside_start = time.time()
    # 1: killed right after the step-40 write made its hidden directory; 2: after the step-80 write sealed its
    # checkpoint (COMPLETE written) but before the rename; 3: ends, its last write held 3 s so the end waits.
    moments = [("120@40:prepared", True), ("120@80:sealed", True), ("3@160", False)]
    for attempt, (pause, kill) in enumerate(moments, 1):
        code, text = _run(out, tmp_path / f"attempt-{attempt}.log", pause, kill)
        assert (code != 0) if kill else (code == 0), text[-3000:]
    outside = time.time() - outside_start
    assert "resuming from step" in text
    assert "is still being written; waiting for it before the end of the run" in text, text[-3000:]
    assert _final_weights(out) == _final_weights(reference)
    assert not [p.name for p in (out / "checkpoints").iterdir() if ".tmp-" in p.name]

    from paratrain.goodput import accounting, ledger

    run = accounting.account(ledger.read_records(out / "checkpoints" / ledger.LEDGER_FILE))
    assert [a.ended for a in run.attempts] == [False, False, True]
    for category in ("startup", "train", "redone", "save", "eval", "recovery", "rest"):
        assert run.seconds[category] > 0, (category, run.to_dict())
    assert run.accounted >= 0.99, run.to_dict()
    assert abs(run.goodput - run.seconds["train"] / outside) <= 0.01, (outside, run.to_dict())
    assert abs(run.wall - outside) <= 0.05 * outside, (outside, run.to_dict())
    assert any(s.get("background") for a in run.attempts for s in a.saves)
    summary = json.loads((out / "summary.json").read_text())["goodput"]
    assert summary["attempts"] == 3 and summary["failed_attempts"] == 2, summary

    shown = subprocess.run([sys.executable, "-m", "paratrain", "goodput", str(out)], env=clean_env(),
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "redone steps" in shown.stdout and "goodput" in shown.stdout and "accounted" in shown.stdout
    assert (out / "goodput.png").read_bytes()[:4] == b"\x89PNG"
