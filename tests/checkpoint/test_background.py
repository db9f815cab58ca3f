"""The writing thread of background saves: one per process, handed each write, finishing it at exit."""

import subprocess
import sys
import textwrap
import threading

import pytest

from paratrain.checkpoint.background import BackgroundWrite


def test_every_write_goes_to_the_same_waiting_thread_and_what_it_raises_reaches_the_wait():
    threads = []
    release = threading.Event()

    def write(name):
        def run():
            threads.append(threading.current_thread())
            release.wait(10)
            if name == "bad":
                raise OSError("disk full")
            return f"/checkpoints/{name}"
        return run

    first = BackgroundWrite("step-1", write("step-1"))
    assert first.running  # handed over, not waited for: the write is still blocked
    release.set()
    first.wait("the test")
    assert first.path == "/checkpoints/step-1" and not first.running
    second = BackgroundWrite("bad", write("bad"))
    with pytest.raises(OSError, match="disk full"):
        second.wait("the test")
    assert len(threads) == 2 and threads[0] is threads[1]  # no thread started per save
    assert threads[0].name.startswith("paratrain-checkpoint") and not threads[0].daemon


SCRIPT = """
import atexit, sys, time
from pathlib import Path
from paratrain.checkpoint.background import BackgroundWrite

out = Path(sys.argv[1])

def slow(name):
    def write():
        time.sleep(1.0)
        (out / name).write_text("complete")
        return str(out / name)
    return write

def at_exit():  # a save from an atexit handler: the threads take no more work by then
    BackgroundWrite("from-atexit", slow("from-atexit"))

atexit.register(at_exit)
BackgroundWrite("last", slow("last"))
if sys.argv[2] == "fast-exit":
    from paratrain.env.fast_exit import exit_without_teardown
    exit_without_teardown(0)
"""


@pytest.mark.parametrize("ending", ["normal", "fast-exit"])
def test_a_process_that_exits_while_a_write_runs_finishes_it_first(tmp_path, ending):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run([sys.executable, str(script), str(tmp_path), ending], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "last").read_text() == "complete"
    assert (tmp_path / "from-atexit").read_text() == "complete"

