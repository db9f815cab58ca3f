"""The words of a failure line: what gloo says, without its source place and sign-off; each rank's own
ending; the hint that applies; the line said when the group restarts."""

from __future__ import annotations

from types import SimpleNamespace

from paratrain.diagnostics.failure_report import build_report, peer_address, plain_message, rank_outcome
from paratrain.launch.restart_notice import restart_line

GLOO = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [10.79.0.2]:59072: "
        "Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. "
        "Check the logs of the remote worker before reporting an error. GLHF! 🏖️")


def test_gloos_source_place_and_sign_off_are_not_part_of_the_line():
    assert plain_message(GLOO) == "Read error [10.79.0.2]:59072: Connection reset by peer."
    assert peer_address(plain_message(GLOO)) == "10.79.0.2"  # the peer is still named
    assert plain_message("ValueError in my code") == "ValueError in my code" and plain_message(None) is None


def test_a_rank_that_lost_its_peer_reads_plainly(tmp_path):
    log = tmp_path / "stderr.log"
    log.write_text(f"[rank0]:Traceback (most recent call last):\n[rank0]:  File \"x.py\", line 1, in <module>\n"
                   f"[rank0]:RuntimeError: {GLOO}\n")
    failure = SimpleNamespace(error_file_data={}, exitcode=1, local_rank=0, pid=7, timestamp=0)
    outcome = rank_outcome(0, failure, str(log), None)
    assert outcome.peer_lost and "GLHF" not in outcome.how() and "pair.cc" not in outcome.how()
    assert outcome.how() == "exited with code 1 after RuntimeError: Read error [10.79.0.2]:59072: Connection reset by peer."


def _outcome(rank, exitcode, message, log_dir):
    log = log_dir / f"rank{rank}.log"
    log.write_text(f"[rank{rank}]:Traceback (most recent call last):\n[rank{rank}]:  File \"x.py\", line 9, in <module>\n"
                   f"[rank{rank}]:{message}\n" if message else "")
    failure = SimpleNamespace(error_file_data={}, exitcode=exitcode, local_rank=rank, pid=10 + rank, timestamp=0)
    return rank_outcome(rank, failure, str(log), None)


def test_a_rank_that_raised_as_the_launcher_stopped_it_is_named_with_its_own_error(tmp_path):
    first = _outcome(0, 1, "ValueError: bad input on rank 0", tmp_path)
    second = _outcome(1, -15, "ValueError: bad input on rank 1", tmp_path)  # SIGTERM arrived while it exited
    quiet = _outcome(2, -15, None, tmp_path)  # stopped in the middle of its work: no error of its own
    report = build_report([second, quiet, first])
    assert report.first.rank == 0 and report.stopped == [2]
    assert [c.rank for c in report.consequences] == [1]
    assert "rank 1 raised ValueError: bad input on rank 1 (the launcher stopped it as it exited)" in report.summary()


def test_a_peer_lost_while_the_group_formed_gets_the_hint_that_applies(tmp_path):
    joining = _outcome(0, 1, "RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out connecting: "
                       "SO_ERROR: Connection refused, remote=[127.0.0.1]:6057", tmp_path)
    assert joining.peer_lost and joining.while_joining
    hint = build_report([joining]).hint
    assert "could not connect while forming the process group" in hint and "ckpt.save" not in hint
    midway = _outcome(1, 1, f"RuntimeError: {GLOO}", tmp_path)
    assert "rank-dependent branch" in build_report([midway]).hint  # inside a collective: the old advice stands


def test_the_restart_line_names_who_ended_how_and_the_attempt_that_starts(tmp_path):
    killed = SimpleNamespace(error_file_data={}, exitcode=-9, local_rank=1, pid=41, timestamp=5)
    lost = SimpleNamespace(error_file_data={}, exitcode=1, local_rank=0, pid=40, timestamp=5)
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "stderr.log").write_text(f"Traceback (most recent call last):\nRuntimeError: {GLOO}\n")
    logs = {0: tmp_path / "0" / "stderr.log"}
    line = restart_line({1: killed, 0: lost}, remaining=2, max_restarts=3, log_file=logs.get)
    assert line.startswith("rank 1 (local rank 1, host ") and ", pid 41) was killed by SIGKILL (rank 0 lost its peer)" in line
    assert line.endswith("; restarting the group: attempt 2 of 4")
    assert "does not use up --max-restarts" in restart_line({}, remaining=2, max_restarts=3, log_file=logs.get)
