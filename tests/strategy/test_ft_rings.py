"""The rings of ft-ddp: a member that never comes to a new ring's set-up is named after the roll call, not after
the whole collective timeout; members that all come set it up and all-reduce. Real processes, a real TCPStore."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest

pytest.importorskip("torchft")


def members(ranks: list[int], world: int) -> list[dict]:
    from torch.distributed import TCPStore

    from tests.support import clean_env, free_port

    port = free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    address = f"127.0.0.1:{port}/torchft/1/0"  # one quorum's prefix, as torchft's Manager makes it
    processes = [subprocess.Popen([sys.executable, "-m", "tests.strategy.ft_ring_member", address, str(rank), str(world)],
                                  env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for rank in ranks]
    said = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-2000:]
        said.append(json.loads(out.strip().splitlines()[-1]))
    del store
    return said


def test_a_member_that_never_comes_is_named_after_the_roll_call_and_members_that_come_all_reduce():
    from paratrain.strategy.ft_rings import ROLL_CALL_S

    missing = members([0, 1], world=3)  # ring rank 2 asked for the quorum and died
    for seen in missing:
        assert "ring rank(s) [2] of this quorum did not come within 2 s" in seen.get("error", ""), seen
        assert seen["s"] >= ROLL_CALL_S, seen  # the roll call's wait, not gloo's 10 s set-up timeout, ended it
    complete = members([0, 1, 2], world=3)
    assert [seen.get("sum") for seen in complete] == [3.0, 3.0, 3.0], complete
