"""The words of a failure line: what gloo says, without its source place and sign-off."""

from __future__ import annotations

from types import SimpleNamespace

from paratrain.diagnostics.failure_report import peer_address, plain_message, rank_outcome

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
