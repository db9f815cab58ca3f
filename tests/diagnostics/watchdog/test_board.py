"""The progress board on a real store (torch's HashStore): what each exchange returns, and how many store calls
it costs once every rank has published (the store serves every rank of the job every poll)."""

from __future__ import annotations

import torch.distributed as dist

from paratrain.diagnostics.watchdog.board import ProgressBoard
from paratrain.diagnostics.watchdog.stall import Beat


class CountedStore:
    """A real store that counts the calls made to it."""

    def __init__(self, store):
        self.store, self.calls = store, 0

    def __getattr__(self, name):
        method = getattr(self.store, name)

        def call(*args):
            self.calls += 1
            return method(*args)

        return call


def test_an_exchange_returns_who_published_and_costs_three_calls_once_all_have():
    store = CountedStore(dist.HashStore())
    boards = [ProgressBoard(store, rank, 64) for rank in range(64)]
    beat = lambda rank: Beat(rank, "host", 100 + rank, 3, "forward", 0.5, 1)  # noqa: E731
    assert [b.rank for b in boards[0].exchange(beat(0))] == [0]  # the others have not published yet
    for board in boards[1:]:
        board.publish(beat(board.rank))
    store.calls = 0
    seen = boards[5].exchange(beat(5))
    assert [b.rank for b in seen] == list(range(64)) and seen[7].pid == 107
    assert store.calls == 3  # publish, one check of every key, one multi_get: not one call per rank
    store.calls = 0
    boards[5].round_trip()
    assert store.calls == 1
