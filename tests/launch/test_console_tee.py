"""The console copy of a worker's log holds a line back until its newline (one real thread)."""

from __future__ import annotations

import io
import threading
import time

from paratrain.launch import console_tee


def test_a_line_written_in_parts_is_copied_once_whole_and_a_lasting_partial_one_after_the_hold(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("")
    console, finished = io.StringIO(), threading.Event()
    tail = threading.Thread(target=console_tee.tail_whole_lines, args=("[rank0]:", str(log), console, finished, 0.01))
    tail.start()
    with open(log, "a") as out:
        for part in ("first", " part-b", "\n"):
            out.write(part)
            out.flush()
            time.sleep(0.1)  # the tail reads the file between the parts, as on a loaded machine
        out.write("no newline yet")
        out.flush()
        time.sleep(console_tee.HOLD_S + 0.3)
        out.write("last")
        out.flush()
    finished.set()
    tail.join(timeout=10)
    assert console.getvalue() == "[rank0]:first part-b\n[rank0]:no newline yet\n[rank0]:last"


def test_a_line_that_carries_the_rank_tag_already_gets_it_once():
    # torch's excepthook writes "[rank0]: Traceback"; the launcher's tag is not repeated.
    assert console_tee.without_tag("[rank0]: Traceback (most recent call last):\n", "[rank0]:") == \
        "Traceback (most recent call last):\n"
    assert console_tee.without_tag("[rank1]: x\n", "[rank0]:") == "[rank1]: x\n"  # another rank's tag is text
    assert console_tee.without_tag("plain\n", "[rank0]:") == "plain\n"
