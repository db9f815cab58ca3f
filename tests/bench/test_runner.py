"""The failed row's one line: the method's own exception, not its launcher's wrapper."""

from paratrain.bench.runner import last_error_line

TORCHRUN_TAIL = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "train.py", line 3, in <module>
[rank1]: ValueError: expected 4 features, got 3
E1123 torch.distributed.elastic.multiprocessing.api: failed (exitcode: 1)
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
"""


def test_the_workers_exception_wins_over_the_launchers(tmp_path):
    log = tmp_path / "output.log"
    log.write_text(TORCHRUN_TAIL)
    assert last_error_line(log) == "ValueError: expected 4 features, got 3"


def test_without_an_exception_the_last_line(tmp_path):
    log = tmp_path / "output.log"
    log.write_text("starting\nKilled\n\n")
    assert last_error_line(log) == "Killed"


TORCHRUN_ABORT_TAIL = """\
[rank1]:terminate called without an active exception
Traceback (most recent call last):
  File "torch/distributed/run.py", line 1032, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
crashes.py FAILED
Root Cause (first observed failure):
  exitcode  : -6 (pid: 24804)  (SIGABRT)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 24804
======================================================
"""


def test_a_child_that_aborts_is_quoted_in_its_own_words_not_the_launchers(tmp_path):
    log = tmp_path / "output.log"
    log.write_text(TORCHRUN_ABORT_TAIL)
    assert last_error_line(log, 1) == "terminate called without an active exception (Signal 6 (SIGABRT))"


def test_a_launcher_killed_by_a_signal_says_which(tmp_path):
    log = tmp_path / "output.log"
    log.write_text("step 3\n")
    assert last_error_line(log, -9) == "killed by SIGKILL; step 3"
    assert last_error_line(tmp_path / "absent.log", 3) == "exit code 3"
