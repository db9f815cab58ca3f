"""torch elastic's ChildFailedError → our one-line errors (torch's real failure records, no processes)."""

import json
import signal

from torch.distributed.elastic.multiprocessing.errors import (
    ChildFailedError,
    ProcessFailure,
)

from paratrain.errors import LaunchError, WorkerError
from paratrain.launch.failures import script_failure, worker_error


def failure(local_rank, exitcode, error_file="/nonexistent/error.json"):
    return ProcessFailure(local_rank=local_rank, pid=4000 + local_rank, exitcode=exitcode, error_file=error_file)


def recorded(tmp_path, text):
    path = tmp_path / "error.json"  # the format torch's ErrorHandler.record_exception writes
    path.write_text(
        json.dumps(
            {
                "message": {
                    "message": text,
                    "extraInfo": {"py_callstack": "Traceback...\nValueError: x", "timestamp": "1"},
                }
            }
        )
    )
    return str(path)


def test_script_failure_names_rank_exit_code_log_and_hint(tmp_path):
    exc = ChildFailedError("train.py", {3: failure(1, 2)})
    error = script_failure(exc)
    assert isinstance(error, LaunchError) and error.exit_code == 2
    assert str(error) == "rank 3 (local rank 1, pid 4001) exited with code 2; its traceback is above"
    log = tmp_path / "stderr.log"
    error = script_failure(exc, log_file=lambda local_rank: log, hint=lambda code: f"fix for {code}")
    assert str(error).endswith(f"its output is in {log}; fix for 2")


def test_script_failure_with_a_signal_and_several_ranks():
    error = script_failure(ChildFailedError("train.py", {0: failure(0, -signal.SIGKILL)}))
    assert "was killed by SIGKILL" in str(error) and error.exit_code == 128 + signal.SIGKILL
    both = script_failure(ChildFailedError("train.py", {0: failure(0, 1), 1: failure(1, 1)}))
    assert "failed too" in str(both) and "\n" not in str(both)


def test_script_failure_quotes_a_recorded_exception(tmp_path):
    exc = ChildFailedError("train.py", {1: failure(1, 1, recorded(tmp_path, "ValueError: bad shape\nmore"))})
    assert "exited with code 1 after ValueError: bad shape;" in str(script_failure(exc))


def test_worker_error_for_spawned_functions(tmp_path):
    exc = ChildFailedError("fn", {1: failure(1, 1, recorded(tmp_path, "ValueError: bad shape"))})
    error = worker_error(exc)
    assert isinstance(error, WorkerError) and (error.rank, error.exc_type, error.remote_message) == (
        1,
        "ValueError",
        "bad shape",
    )
    assert "Traceback" in error.remote_traceback
    died = worker_error(ChildFailedError("fn", {0: failure(0, -signal.SIGSEGV)}))
    assert isinstance(
        died, LaunchError
    ) and "rank 0 (pid 4000) was killed by SIGSEGV without a Python exception" in str(died)
