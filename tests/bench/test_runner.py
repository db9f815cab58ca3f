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
