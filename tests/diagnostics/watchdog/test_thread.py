"""The hang watchdog: through the real CLI a rank that sleeps for good is named, with its frame; its thread
leaves no last resort armed once stopped."""

from __future__ import annotations

import faulthandler
import re
import subprocess
import threading
import time

import torch.distributed as dist

from paratrain.diagnostics.watchdog.thread import Watchdog
from tests.launch.processes import HANG_GUARD_S
from tests.support import ROOT, paratrain_cmd

FIT = str(ROOT / "tests" / "diagnostics" / "fit_script.py")
STALL_TIMEOUT_S = 8


def test_a_rank_sleeping_forever_is_named_with_its_frame_and_every_process_ends(tmp_path, cli_env):
    command = paratrain_cmd("run", "--nproc-per-node", "2", "--stall-timeout", str(STALL_TIMEOUT_S), FIT,
                            str(tmp_path / "run"), "--steps", "20", "--stall-rank", "1", "--stall-step", "3")
    run = subprocess.run(command, cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    ended = time.time()
    assert run.returncode == 124, run.stderr  # the watchdog's exit code, as GNU timeout's
    began = float(re.search(r"STALL BEGINS ([\d.]+)", run.stdout).group(1))
    assert ended - began <= STALL_TIMEOUT_S + 30  # the launcher (so every worker) ended within stall timeout + 30 s
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"paratrain run: error: the watchdog ended the job: stall: no progress for {STALL_TIMEOUT_S}s: "
                           "rank 1 (host "), last
    assert "at step 3, phase logging, in on_step_end (fit_script.py:" in last and "time.sleep(3600)" in last
    assert "rank 0 waits at step 3" in last and "every rank's Python stack is in its log" in last
    # The stalled rank wrote all its threads' stacks to its log (faulthandler); the others dump theirs too
    # unless the launcher stops them first (the first rank to exit ends the job).
    assert "[rank1]:paratrain watchdog: rank 1: a stall was detected; this rank's threads:" in run.stdout + run.stderr
    assert re.search(r"\[rank1\]:\s+File \".*fit_script.py\", line \d+ in on_step_end", run.stderr), run.stderr[-3000:]


class HeldStore:
    """A real store whose calls can be held until released: a job store that stops answering for a while."""

    def __init__(self):
        self.store = dist.HashStore()
        self.open = threading.Event()
        self.open.set()
        self.held = threading.Event()  # a call is waiting at the gate

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def call(*args):
            if not self.open.is_set():
                self.held.set()
                self.open.wait(60)
            return method(*args)

        return call


def test_a_watchdog_stopped_while_its_thread_waits_in_a_store_call_arms_no_hard_exit_afterwards(monkeypatch):
    """The last resort (faulthandler's exit timer) must not outlive the watchdog: one left armed ends the
    process that stopped the watchdog a stall timeout later."""
    calls: list[str] = []
    monkeypatch.setattr(faulthandler, "dump_traceback_later", lambda *args, **kwargs: calls.append("arm"))
    monkeypatch.setattr(faulthandler, "cancel_dump_traceback_later", lambda: calls.append("cancel"))
    store = HeldStore()
    watchdog = Watchdog(stall_timeout=60, rank=0, world_size=1, poll=0.05, store=store).start()
    deadline = time.monotonic() + 30
    while "arm" not in calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "arm" in calls  # the thread publishes, armed
    closed_at = len(calls)
    store.open.clear()
    assert store.held.wait(30)  # the thread now waits in a store call
    # stop() joins the thread for poll + 5 s, cancels the timer, then publishes (held too): answer after that.
    threading.Timer(watchdog.poll + 6, store.open.set).start()
    watchdog.stop()
    watchdog._thread.join(30)
    assert not watchdog._thread.is_alive()
    after = calls[closed_at:]
    assert "cancel" in after and "arm" not in after[after.index("cancel"):], after


def _runtime_left_open(report_dir: str) -> int:
    """A Runtime inside the user's own group, never closed (as in a script that makes several and closes
    only the one that owns the group): which watchdog threads are still running once every other exit
    handler has run, i.e. when the interpreter finalizes and ends daemon threads wherever they are."""
    import atexit
    import os
    from pathlib import Path

    import paratrain as pt

    def running_at_exit() -> None:  # registered first, so run last among the exit handlers
        names = sorted(t.name for t in threading.enumerate() if t.name == "paratrain-watchdog" and t.is_alive())
        Path(report_dir, f"rank{os.environ['RANK']}.txt").write_text(",".join(names) or "none")

    atexit.register(running_at_exit)
    dist.init_process_group("gloo")
    rt = pt.Runtime(strategy="ddp", timeout=60)
    assert not rt.owns_process_group and any(t.name == "paratrain-watchdog" for t in threading.enumerate())
    return rt.rank


def test_a_watchdog_never_stopped_is_stopped_before_the_interpreter_finalizes(tmp_path):
    """A daemon watchdog thread still running at finalization may be inside a store call with the GIL
    released; CPython ends it as it takes the GIL back, through C++ frames that cannot be unwound, and
    the process aborts (SIGABRT) after its work is done: a worker that finished reported as killed (seen
    once in six two-process DeepSpeed runs)."""
    import paratrain as pt

    pt.spawn(_runtime_left_open, nprocs=2, args=(str(tmp_path),))
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"rank0.txt": "none", "rank1.txt": "none"}
