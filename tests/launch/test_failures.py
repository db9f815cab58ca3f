"""torch elastic's ChildFailedError → our one-line errors (torch's real failure records, no processes)."""

import json
import signal
import socket

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
    host = socket.gethostname()
    # No exception was recorded and no log kept: nothing claims a traceback was printed.
    assert str(error) == f"rank 3 (local rank 1, host {host}, pid 4001) failed first: it exited with code 2"
    log = tmp_path / "stderr.log"
    log.write_text("[rank3]: Traceback (most recent call last):\n[rank3]:   File \"train.py\", line 4, in <module>\n"
                   "[rank3]: ValueError: bad shape (3, 4)\n")
    error = script_failure(exc, log_file=lambda local_rank: log, hint=lambda code: f"fix for {code}")
    assert "exited with code 2 after ValueError: bad shape (3, 4)" in str(error)  # read from the rank's log
    assert str(error).endswith(f"its output is in {log}; fix for 2")
    assert error.report.first.last_frames == ['File "train.py", line 4, in <module>']


def test_the_killed_rank_is_first_and_ranks_the_launcher_stopped_did_not_fail(tmp_path):
    lost = recorded(tmp_path, "RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:1234")
    exc = ChildFailedError("train.py", {0: failure(0, 1, lost), 1: failure(1, -signal.SIGKILL), 2: failure(2, -signal.SIGTERM)})
    error = script_failure(exc)
    text = str(error)
    assert text.startswith("rank 1 (local rank 1") and "failed first: it was killed by SIGKILL" in text
    assert "after it, rank 0 exited with code 1 after RuntimeError: [gloo] Connection closed by peer" in text
    assert "rank 2 stopped by the launcher" in text and "failed too" not in text and "\n" not in text
    assert "traceback is above" not in text and error.exit_code == 128 + signal.SIGKILL


def test_a_lost_peer_with_nobody_else_failing_hints_at_a_rank_dependent_collective(tmp_path):
    lost = recorded(tmp_path, "RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:1234")
    text = str(script_failure(ChildFailedError("train.py", {0: failure(0, 1, lost), 1: failure(1, -signal.SIGTERM)})))
    assert "rank-dependent branch (`if rank == 0:`" in text and "ckpt.save" in text


def test_a_stall_verdict_is_the_headline_and_failure_json_keeps_the_facts(tmp_path):
    stall = recorded(tmp_path, "CollectiveTimeoutError: stall: no progress for 6s: rank 1 (host h, pid 9) at step 3")
    error = script_failure(ChildFailedError("train.py", {0: failure(0, 124, stall), 1: failure(1, -signal.SIGTERM)}))
    assert str(error).startswith("the watchdog ended the job: stall: no progress for 6s: rank 1 (host h, pid 9) at step 3")
    saved = json.loads(error.report.save(tmp_path / "run").read_text())
    assert saved["first"]["exitcode"] == 124 and saved["stopped_ranks"] == [1] and saved["summary"] == str(error)


def test_script_failure_with_a_signal():
    error = script_failure(ChildFailedError("train.py", {0: failure(0, -signal.SIGKILL)}))
    assert "was killed by SIGKILL" in str(error) and error.exit_code == 128 + signal.SIGKILL
    assert "a killed process prints no traceback" in str(error)


def test_script_failure_quotes_a_recorded_exception(tmp_path):
    exc = ChildFailedError("train.py", {1: failure(1, 1, recorded(tmp_path, "ValueError: bad shape\nmore"))})
    assert "exited with code 1 after ValueError: bad shape; its traceback is above" in str(script_failure(exc))


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


def test_75_and_124_mean_paratrains_verdicts_only_when_the_worker_recorded_them(tmp_path):
    saved = recorded(tmp_path, "PreemptedError: preempted by SIGTERM after step 7: checkpoint at step 7")
    preempted = script_failure(ChildFailedError("train.py", {0: failure(0, 75, saved)}))
    assert preempted.exit_code == 75 and str(preempted) == "rank 0 preempted by SIGTERM after step 7: checkpoint at step 7"
    stall = tmp_path / "stall"
    stall.mkdir()
    stalled = script_failure(ChildFailedError("t.py", {1: failure(1, 124, recorded(stall, "CollectiveTimeoutError: stall: rank 1 ..."))}))
    assert stalled.exit_code == 124 and str(stalled).startswith("the watchdog ended the job: stall: rank 1")
    for own in (75, 124):  # a script's own exit code: said in the message, not passed on as a verdict
        error = script_failure(ChildFailedError("train.py", {0: failure(0, own)}))
        assert error.exit_code == 1 and f"exited with code {own}" in str(error)
        assert str(error).endswith(f"paratrain exits 1, not {own}: {own} means "
                                   f"{'preempted' if own == 75 else 'stalled'} only when paratrain's own loop or watchdog says so")


def test_a_preemption_is_read_from_the_workers_error_files(tmp_path):
    from paratrain.launch.failures import workers_recorded

    root = tmp_path / "run_abc"
    for attempt, text in ((0, "PreemptedError: old"), (1, "RuntimeError: x")):
        (root / f"attempt_{attempt}" / "0").mkdir(parents=True)
        (root / f"attempt_{attempt}" / "0" / "error.json").write_text(
            json.dumps({"message": {"message": text, "extraInfo": {"py_callstack": "", "timestamp": "1"}}}))
    assert not workers_recorded(root, "PreemptedError")  # only the newest attempt counts
    (root / "attempt_1" / "1").mkdir()
    (root / "attempt_1" / "1" / "error.json").write_text(
        json.dumps({"message": {"message": "PreemptedError: saved", "extraInfo": {"timestamp": "1"}}}))
    assert workers_recorded(root, "PreemptedError") and not workers_recorded(None, "PreemptedError")


def test_a_rank_that_exited_early_with_code_0_is_named_not_the_rank_it_left_waiting(tmp_path):
    # Before: "rank 0 failed first: … Connection closed by peer", and rank 1, which had returned early, unnamed.
    lost = recorded(tmp_path, "RuntimeError: [gloo] Connection closed by peer [127.0.0.1]:1234")
    text = str(script_failure(ChildFailedError("train.py", {2: failure(0, 1, lost)}), local_world_size=2))
    assert text.startswith("rank 3 exited early (code 0) while the others still ran: rank 2 (host ")
    assert "then lost it in a collective and exited with code 1 after RuntimeError" in text
    # Every rank failed or was stopped: nobody is named as having left early.
    both = str(script_failure(ChildFailedError("train.py", {0: failure(0, 1, lost), 1: failure(1, -signal.SIGTERM)}),
                              local_world_size=2))
    assert "exited early" not in both
