"""Process groups made one after another in the same processes (2 real gloo ranks)."""

from __future__ import annotations

import paratrain as pt
from tests.runtime.workers import groups_one_after_another


def test_a_process_can_make_a_new_group_after_closing_one():
    # Each new group rendezvouses under a fresh store prefix: without it, the second or
    # third group reads the addresses the closed one published and fails to connect.
    assert pt.spawn(groups_one_after_another, nprocs=2, args=(5,)) == [1.0, 3.0, 5.0, 7.0, 9.0]
