"""A run directory whose own records were damaged (a kill, a full disk, a bad byte) stays resumable:
the intact checkpoints are reached, the damaged file is set aside with one line, never deleted."""

from __future__ import annotations

import json

import pytest

from paratrain.cli.main import main
from paratrain.loop.run_log import read_records

SMALL = ["digits", "--limit-train", "64", "--limit-eval", "16"]


def test_a_truncated_task_record_is_set_aside_and_the_checkpoints_resume(capsys, tmp_path):
    # Before: "task.json is not a readable task record …; use another --out directory": every step unreachable;
    # a byte of metrics.jsonl that is not UTF-8 stopped every rerun with a UnicodeDecodeError.
    out = tmp_path / "run"
    assert main(["train", *SMALL, "--max-steps", "2", "--out", str(out)]) == 0
    text = (out / "task.json").read_text()
    (out / "task.json").write_text(text[: len(text) // 2])
    metrics = bytearray((out / "metrics.jsonl").read_bytes())
    metrics[len(metrics) // 2] = 0xFF  # and one bad byte in metrics.jsonl: that line is skipped, the rest read
    (out / "metrics.jsonl").write_bytes(bytes(metrics))
    capsys.readouterr()
    assert main(["train", *SMALL, "--max-steps", "3", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    aside = [p for p in out.iterdir() if p.name.startswith("task.json.damaged-")]
    assert len(aside) == 1 and aside[0].read_text() == text[: len(text) // 2]
    assert f"paratrain: warning: {out / 'task.json'} is not a readable task record (" in captured.err
    assert f"moved it to {aside[0]}" in captured.err
    assert "resumed from step 2" in captured.out + captured.err
    assert json.loads((out / "task.json").read_text())["task"] == "digits"
    attempts = [r["attempt"] for r in read_records(out / "metrics.jsonl") if r["event"] == "attempt"]
    assert attempts == [1, 2]


def test_a_truncated_task_record_without_checkpoints_is_still_refused(capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "task.json").write_text('{"task": "dig')
    assert main(["train", *SMALL, "--max-steps", "1", "--out", str(out)]) == 2
    assert "is not a readable task record" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["task.json"]


class DeleteOutDir:
    """Stands in for `rm -rf OUT` from another shell, right after the first checkpoint."""

    def on_checkpoint(self, trainer, step):
        import shutil

        if (trainer.out_dir / "checkpoints").is_dir():
            for _ in range(100):  # as `rm -rf` run again: TensorBoard's thread may add a file while the tree goes
                shutil.rmtree(trainer.out_dir, ignore_errors=True)
                if not trainer.out_dir.exists():
                    return
            raise AssertionError(f"{trainer.out_dir} could not be removed")

    def __getattr__(self, name):  # every other hook: nothing
        return lambda *args: None


def test_an_out_dir_deleted_mid_run_ends_the_run_in_one_line(capsys, tmp_path):
    # Before: the run trained on into a deleted directory and ended "done", exit 0 (with TensorBoard:
    # its writer thread's traceback, then the same error raised twice more).
    import paratrain as pt
    from paratrain.errors import CheckpointError

    out = tmp_path / "run"
    with pytest.raises(CheckpointError) as gone:
        pt.fit("digits", out_dir=str(out), callbacks=[DeleteOutDir()], max_steps=6, save_every=2, progress=False,
               task_options=pt.tasks.TaskOptions(limit_train=64, limit_eval=16))
    # Found by the background save at step 4, before its commit; raised by the next save, naming it.
    assert str(gone.value).startswith(f"checkpoint step-000004 was not saved: {out} was deleted or moved while this "
                                      "run wrote into it (at step 4): ")
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))  # the next save did not make it again
    assert "Traceback" not in capsys.readouterr().err


def test_a_disk_that_fills_between_saves_is_one_line_from_the_metrics_file(tmp_path):
    # Before: OSError from metrics.jsonl's write, then the log's close and TensorBoard's thread: chained tracebacks.
    import errno

    from paratrain.errors import CheckpointError
    from paratrain.loop.run_log import RunLog

    class FullDisk:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            raise OSError(errno.ENOSPC, "No space left on device")

    log = RunLog(tmp_path, 0, tensorboard=False)
    log._metrics = FullDisk()
    with pytest.raises(CheckpointError) as full:
        log.record("train", 3, loss=1.0)
    assert str(full.value) == (f"cannot write: {tmp_path / 'metrics.jsonl'}: No space left on device; free disk space, lower "
                               "keep_last, or write checkpoints to a bigger disk; then run the same command to resume "
                               "from the newest checkpoint")
    log.close()  # nothing more to say, and no second error

    # The rank's log file, written by every console line, is named the same way (it was an OSError raised
    # from inside the trackers' own failure line: chained tracebacks).
    log = RunLog(tmp_path, 0, tensorboard=False)
    log._file = FullDisk()
    with pytest.raises(CheckpointError, match=rf"^cannot write: {tmp_path / 'logs' / 'rank0.log'}: No space left"):
        log.console("epoch 1")
    log.close()


def test_trackers_json_that_cannot_be_written_is_said_once_not_at_every_step(tmp_path, capsys):
    from paratrain.loop.run_log import RunLog

    (tmp_path / "trackers.json.tmp").mkdir()  # its every write fails (IsADirectoryError), as on a full disk
    log = RunLog(tmp_path, 0, tensorboard=False, log_with=("csv",))
    log.open_trackers(0, {})
    for step in (1, 2, 3):
        log.record("train", step, loss=1.0)
    log.close()
    said = [line for line in capsys.readouterr().out.splitlines() if "could not keep the trackers' run ids" in line]
    assert len(said) == 1, said
