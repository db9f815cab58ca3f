"""Readable multi-rank output: whole lines, tagged with their rank, and per-rank filtering."""

from __future__ import annotations

import re

from tests.launch.processes import run_all
from tests.support import ROOT, paratrain_cmd

CHATTY = str(ROOT / "tests" / "diagnostics" / "chatty.py")


def test_two_ranks_never_share_a_line_and_a_filter_shows_one_rank():
    tagged, filtered = run_all([
        paratrain_cmd("run", "--nproc-per-node", "2", CHATTY),
        paratrain_cmd("run", "--nproc-per-node", "2", "--local-ranks-filter", "1", CHATTY),
    ])
    assert tagged.returncode == 0 and filtered.returncode == 0, tagged.stderr + filtered.stderr
    lines = tagged.stdout.splitlines()
    assert len(lines) == 400
    for line in lines:  # exactly one rank's whole line, behind its tag
        assert re.fullmatch(r"\[rank([01])\]:rank\1-line\d+ part-b\1", line), line
    assert {line for line in filtered.stdout.splitlines()} == {f"[rank1]:rank1-line{i} part-b1" for i in range(200)}


PROGRESS = str(ROOT / "tests" / "launch" / "progress_script.py")


def _on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal, as in an interactive shell."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios

    from tests.launch.processes import HANG_GUARD_S
    from tests.support import clean_env

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns, as a real one has
    proc = subprocess.Popen(argv, cwd=ROOT, env=clean_env(), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=HANG_GUARD_S), b"".join(chunks).decode(errors="replace")


def test_rank_0s_bar_shows_on_the_terminal_between_tagged_lines_and_a_traceback_is_tagged_once():
    code, screen = _on_a_terminal(paratrain_cmd("run", "--nproc-per-node", "2", PROGRESS, "--fail"))
    assert code == 1, screen  # rank 1 raises after the bar
    assert re.search(r"steps: 100%\|[^\n]*\| 12/12", screen), screen  # rank 0's bar, drawn to the end
    assert screen.count("steps:") >= 2  # redrawn in place, not once at the end
    # Tagged lines clear the bar's line first, so the bar stays below them.
    assert "\r\x1b[K[rank0]:rank0 halfway" in screen and "\r\x1b[K[rank1]:rank1 halfway" in screen, screen
    # torch's own excepthook tags the traceback too; the launcher's tag is the only one.
    assert "[rank1]:Traceback (most recent call last):" in screen, screen
    assert "[rank1]:[rank1]:" not in screen and "[rank1]: Traceback" not in screen, screen
