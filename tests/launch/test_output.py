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
