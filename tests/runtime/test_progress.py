"""One progress bar (rank 0, terminals), epochs that continue a resumed run."""

from __future__ import annotations

import io

import pytest
from tqdm import tqdm

import paratrain as pt
from paratrain.runtime.progress import epochs, progress


def test_epochs_continue_from_a_resumed_state_or_loader():
    class Resumed:
        epoch = 2

    assert list(epochs(0, 3)) == [0, 1, 2]
    assert list(epochs(Resumed(), 4)) == [2, 3]
    assert list(epochs(None, 2)) == [0, 1]  # resume() found nothing


def test_the_bar_is_drawn_only_when_asked_or_on_a_terminal(monkeypatch):
    silent = progress(range(3))  # stderr is not a terminal under pytest
    assert not isinstance(silent, tqdm) and list(silent) == [0, 1, 2]
    stream = io.StringIO()
    bar = progress(total=4, enabled=True, file=stream)
    assert isinstance(bar, tqdm)
    bar.update(4)
    bar.close()
    assert "4/4" in stream.getvalue()


def test_other_ranks_never_draw(monkeypatch):
    monkeypatch.setattr("paratrain.comm.is_main", lambda: False)
    assert not isinstance(progress(total=4, enabled=True), tqdm)


@pytest.mark.parametrize("method", ["epochs", "progress"])
def test_runtime_offers_the_loop_helpers(method):
    with pt.Runtime() as rt:
        if method == "epochs":
            assert list(rt.epochs(1, 3)) == [1, 2]
        else:
            assert list(rt.progress([5, 6])) == [5, 6]
