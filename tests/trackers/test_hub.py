"""The hub's record of what each tracker holds, across attempts: trackers that record what they are sent."""

from __future__ import annotations

from typing import ClassVar

from paratrain.trackers import TRACKERS, Tracker
from paratrain.trackers.hub import Trackers


class Recording(Tracker):
    """Append-only, holds a step once log() returns (as MLflow)."""

    name = "recording-for-test"
    sent: ClassVar[list[int]] = []

    def open(self, run):
        return "run-1"

    def log(self, metrics, step):
        self.sent.append(step)


class HeldAtClose(Recording):
    """Append-only, holds what it was sent only once closed (as W&B's service)."""

    name = "held-at-close-for-test"
    holds_on_log = False
    sent: ClassVar[list[int]] = []


def _attempt(directory, resumed_from: int, steps: range, closed: bool) -> None:
    hub = Trackers([Recording.name, HeldAtClose.name], directory, say=lambda line: None)
    hub.open({"lr": 0.1}, resumed_from=resumed_from)
    for step in steps:
        hub.log({"loss": float(step)}, step)
    if closed:
        hub.close()


def test_a_step_is_not_sent_again_only_where_the_tracker_holds_it(tmp_path, monkeypatch):
    monkeypatch.setitem(TRACKERS, Recording.name, Recording)
    monkeypatch.setitem(TRACKERS, HeldAtClose.name, HeldAtClose)
    monkeypatch.setattr(Recording, "sent", [])
    monkeypatch.setattr(HeldAtClose, "sent", [])
    # Attempt 1 sends steps 1-6 and is killed (never closes); attempt 2 resumes from step 4.
    _attempt(tmp_path, 0, range(1, 7), closed=False)
    _attempt(tmp_path, 4, range(5, 11), closed=True)
    assert Recording.sent == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # each step once: 5 and 6 were held
    assert HeldAtClose.sent == [1, 2, 3, 4, 5, 6, 5, 6, 7, 8, 9, 10]  # 5 and 6 again: nothing was held
    # Attempt 3 resumes from step 8 of a run whose attempt 2 closed: both trackers hold through step 10.
    Recording.sent.clear()
    HeldAtClose.sent.clear()
    _attempt(tmp_path, 8, range(9, 13), closed=True)
    assert Recording.sent == HeldAtClose.sent == [11, 12]


def test_a_stop_signal_while_the_trackers_close_waits_for_them_then_acts(tmp_path, monkeypatch):
    import os
    import signal

    class SignalledWhileClosing(Recording):
        name = "signalled-while-closing-for-test"
        def close(self, failed=False):
            os.kill(os.getpid(), signal.SIGTERM)  # the launcher stops the group while this rank closes
            events.append(f"closed, failed={failed}")

    monkeypatch.setitem(TRACKERS, SignalledWhileClosing.name, SignalledWhileClosing)
    monkeypatch.setattr(SignalledWhileClosing, "sent", [])
    events = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: events.append(signal.Signals(signum).name))
    try:
        hub = Trackers([SignalledWhileClosing.name], tmp_path, say=lambda line: None)
        hub.open({}, resumed_from=0)
        hub.log({"loss": 1.0}, 1)
        hub.close(failed=True)
        assert events == ["closed, failed=True", "SIGTERM"]  # closed, then stopped as before
    finally:
        signal.signal(signal.SIGTERM, previous)
