"""A process that ends without the interpreter's teardown still does what a normal exit promises."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from paratrain.env.fast_exit import exit_without_teardown
from tests.support import clean_env

SCRIPT = textwrap.dedent("""
    import atexit, concurrent.futures, sys, threading, time
    from paratrain.env.fast_exit import exit_without_teardown

    out = sys.argv[1]

    def write(name, text):
        with open(f"{out}/{name}", "w") as file:
            file.write(text)

    atexit.register(write, "atexit", "ran")
    kept = open(f"{out}/kept-open", "w")  # never closed: its buffer is written only if someone flushes it
    kept.write("buffered")
    threading.Thread(target=lambda: (time.sleep(0.3), write("thread", "done"))).start()  # not a daemon
    # never shut down: its thread waits for work until the threading module's exit callback wakes it
    executor = concurrent.futures.ThreadPoolExecutor(1)
    executor.submit(lambda: (time.sleep(0.2), write("executor", "done")))

    class Finalized:
        def __del__(self, open=open, path=f"{out}/teardown"):  # bound now: the teardown clears builtins first
            with open(path, "w") as file:
                file.write("ran")

    keep = Finalized()  # a module global: the interpreter's teardown would run its __del__
    print("on a pipe, not flushed yet", end="")
    exit_without_teardown(int(sys.argv[2]))
""")


@pytest.mark.parametrize("code, seen", [(3, 3), (75, 75), (256 + 7, 7)])
def test_the_exit_code_threads_executors_atexit_and_open_files_are_kept_and_the_teardown_is_skipped(tmp_path, code, seen):
    env = clean_env()
    env.pop("PYTHONUNBUFFERED")  # stdout on a pipe is block-buffered: only a flush writes the line
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(code)], env=env,
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == seen, done.stderr
    assert done.stdout == "on a pipe, not flushed yet", done.stderr
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "kept-open").read_text() == "buffered"
    assert (tmp_path / "thread").read_text() == "done"  # joined before the end, as the interpreter does
    assert (tmp_path / "executor").read_text() == "done"
    assert not (tmp_path / "teardown").exists()  # what is skipped: finalizers of objects still alive


def test_an_exit_code_that_is_not_an_int_is_refused():
    with pytest.raises(TypeError, match="int exit code"):
        exit_without_teardown(None)
